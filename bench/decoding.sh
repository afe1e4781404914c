#!/usr/bin/env bash
# Speculative decoding at batch 1 (docs/decoding.md): plain greedy against --spec ngram on a
# trained checkpoint, for a repetitive prompt (a held-out passage given twice, so that the
# continuation can copy) and for plain prose (the passage once), in fp32 and bf16.
#   bench/decoding.sh <build dir> <checkpoint> [tokens]      (default 128 tokens; past the end of text)
# Prints per case: wall seconds plain and with guesses, the speedup, tokens per forward (tau) and
# the share of guessed tokens accepted; and checks that both texts are the same.
set -euo pipefail
BUILD=${1:?build dir} CKPT=$(realpath "${2:?checkpoint}") TOKENS=${3:-128}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
echo "load: $(bench_load); $TOKENS tokens, greedy, OpenMP threads as the machine has"
# A held-out passage: the last 240 bytes of the corpus (its validation part).
passage=$(tail -c 240 "$SRC/data/tinyshakespeare.txt")
printf "%-11s %-5s %-8s %-8s %-8s %-6s %s\n" prompt dtype plain_s spec_s speedup tau accepted
for dtype in fp32 bf16; do
  for kind in repetitive prose; do
    prompt=$passage
    [ $kind = repetitive ] && prompt="$passage
$passage"
    args=(--ckpt "$CKPT" --tokenizer-dir "$SRC/data" --prompt "$prompt" --tokens "$TOKENS"
      --temperature 0 --dtype $dtype --ignore-eos)
    t0=$(date +%s.%N); plain=$("$WEFT" sample "${args[@]}"); t1=$(date +%s.%N)
    spec=$("$WEFT" sample "${args[@]}" --spec ngram --spec-tokens 8 2>err); t2=$(date +%s.%N)
    [ "$plain" = "$spec" ] || { echo "MISMATCH: $kind $dtype"; exit 1; }
    tau=$(grep -o "tau [0-9.]*" err | cut -d' ' -f2)
    acc=$(grep -o "[0-9]* of [0-9]* guessed" err | awk '{ printf "%d/%d", $1, $3 }')
    printf "%-11s %-5s %-8.2f %-8.2f %-8.2f %-6s %s\n" $kind $dtype "$(echo "$t1 - $t0" | bc)" \
      "$(echo "$t2 - $t1" | bc)" "$(echo "($t1 - $t0) / ($t2 - $t1)" | bc -l)" "$tau" "$acc"
  done
done
echo "load after: $(bench_load)"
