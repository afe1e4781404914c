#!/usr/bin/env bash
# Speculation through the server (docs/decoding.md, "In the server"): `weft serve --spec X` on a
# trained checkpoint, driven by `weft bench serve` (text prompts of 32 words, 64 tokens each,
# greedy) at each concurrency given; per --spec and concurrency: output tokens/s, TPOT p50, the
# server process's CPU milliseconds per generated token (user + sys, less sensitive than wall
# time to other jobs on the cores), tau = 1 + accepted / verifies and guesses kept, the last from
# /metrics.
#   bench/serving_spec.sh <build dir> <checkpoint> <dtype> [ppd checkpoint] [draft checkpoint] \
#       [concurrency...]   (default 1 8; the server runs one thread, 8 slots)
set -euo pipefail
BUILD=${1:?build dir} CKPT=$(realpath "${2:?checkpoint}") DTYPE=${3:?fp32 or bf16}
PPD=${4:+$(realpath "$4")} DRAFT=${5:+$(realpath "$5")}
shift $(($# < 5 ? $# : 5))
CONC=("$@")
[ ${#CONC[@]} -gt 0 ] || CONC=(1 8)
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
echo "load: $(bench_load); dtype $DTYPE; one server thread, 8 slots"
specs=("none" "ngram --spec-tokens 8")
[ -n "$PPD" ] && specs+=("ppd --ppd $PPD --spec-tokens 1" "ppd --ppd $PPD --spec-tokens 3")
[ -n "$DRAFT" ] && specs+=("draft --draft $DRAFT --spec-tokens 3")
m() { awk -v k="$1" '$1 == k { print $2 }' <<<"$2"; }
printf "%-18s %-3s %-8s %-9s %-12s %-5s %s\n" spec c tok/s TPOT_ms CPU_ms/token tau kept/guessed
for spec in "${specs[@]}"; do
  # shellcheck disable=SC2086  # the spec's words are flags
  OMP_NUM_THREADS=1 "$WEFT" serve --ckpt "$CKPT" --tokenizer-dir "$SRC/data" --port 0 --threads 1 \
    --slots 8 --kv-cache-gib 0.25 --dtype "$DTYPE" --spec $spec >serve.out 2>serve.err &
  pid=$!
  for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
  url=$(grep -o "http://[0-9.:]*" serve.out) || { cat serve.err; exit 1; }
  for c in "${CONC[@]}"; do
    before=$(curl -s "$url/metrics")
    cpu0=$(awk '{ print $14 + $15 }' /proc/$pid/stat)
    "$WEFT" bench serve --url "$url" --requests $((4 * c)) --rate inf --max-concurrency "$c" \
      --text-prompt --prompt-len 32 --output-len 64 --json b.json >/dev/null
    cpu1=$(awk '{ print $14 + $15 }' /proc/$pid/stat)
    after=$(curl -s "$url/metrics")
    d() { echo $(($(m "$1" "$after") - $(m "$1" "$before"))); }
    gen=$(d weft_generation_tokens_total) acc=$(d weft_spec_accepted_tokens_total)
    gue=$(d weft_spec_guessed_tokens_total) ver=$(d weft_spec_verifies_total)
    name=${spec%% *}
    [ "$spec" = "$name" ] || name="$name, ${spec##* } a step"
    printf "%-18s %-3s %-8s %-9s %-12s %-5s %s\n" "$name" "$c" \
      "$(jq -r '.output_throughput * 10 | round / 10' b.json)" \
      "$(jq -r '.tpot_ms.median * 10 | round / 10' b.json)" \
      "$(awk -v t=$((cpu1 - cpu0)) -v g="$gen" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", 1000 * t / hz / g }')" \
      "$(awk -v a="$acc" -v v="$ver" 'BEGIN { printf "%.2f", (v > 0 ? 1 + a / v : 1) }')" "$acc/$gue"
  done
  kill -TERM $pid
  wait $pid || { echo "weft serve --spec $spec exited $?: $(tail -n 3 serve.err)"; exit 1; }
done
echo "load after: $(bench_load)"
