#!/usr/bin/env bash
# Speculative decoding at batch 1 (docs/decoding.md): plain greedy against --spec ngram, and
# against --spec draft when a draft checkpoint is given, on a trained checkpoint, for a
# repetitive prompt (a held-out passage given twice, so that the continuation can copy) and for
# plain prose (the passage once), in fp32 and bf16.
#   bench/decoding.sh <build dir> <checkpoint> [tokens] [draft checkpoint]
# (default 128 tokens, past the end of text; DRAFT_TOKENS guesses a step for the draft, default
# 3, 8 for ngram; REPS rounds, default 3). Each round runs plain, ngram and draft back to back,
# so that the load of other jobs falls alike on the three; per case the median over rounds of
# the whole process's wall and CPU (user + sys) seconds, start-up included, the speedups, tokens
# per forward (tau), the share of guesses accepted and, per depth, kept / guessed. Fails if a
# text differs from plain greedy's. With SPEC_VOCAB_FROM=<token file> (the training data), the
# draft runs a second time proposing from its --spec-vocab (SPEC_VOCAB, default 4096) most
# frequent ids ("draft-sl"). With DRAFT_WIDTH=W above 1 it runs once more with --draft-width W
# ("draft-wW": the draft's W best ids at each depth, the others leaves beside its chain).
set -euo pipefail
BUILD=${1:?build dir} CKPT=$(realpath "${2:?checkpoint}") TOKENS=${3:-128}
DRAFT=${4:+$(realpath "$4")} DRAFT_TOKENS=${DRAFT_TOKENS:-3} REPS=${REPS:-3}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
echo "load: $(bench_load); $TOKENS tokens, greedy, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all cores}, $REPS rounds"
kinds=(ngram)
[ -n "$DRAFT" ] && kinds+=(draft)
[ -n "$DRAFT" ] && [ -n "${SPEC_VOCAB_FROM:-}" ] && kinds+=(draft-sl)
[ -n "$DRAFT" ] && [ "${DRAFT_WIDTH:-1}" -gt 1 ] && kinds+=("draft-w$DRAFT_WIDTH")
median() { tr ' ' '\n' | sort -g | awk 'NF { a[++n] = $1 } END { print a[int((n + 1) / 2)] }'; }
printf "%-10s %-4s %-8s %-6s %-6s %-7s %-6s %-6s %-7s %-5s %-8s %s\n" prompt dtype spec plain_s \
  spec_s speedup plain_c spec_c cpu_x tau accepted "kept/guessed by depth"
for dtype in fp32 bf16; do
  for prompt_kind in repetitive prose; do
    bench_decode_args "$CKPT" $prompt_kind "$TOKENS" $dtype
    declare -A wall=() cpu=()
    for rep in $(seq "$REPS"); do
      for kind in none "${kinds[@]}"; do
        spec=()
        [ $kind = ngram ] && spec=(--spec ngram --spec-tokens 8)
        [ $kind = draft ] && spec=(--spec draft --draft "$DRAFT" --spec-tokens "$DRAFT_TOKENS")
        [ $kind = draft-sl ] && spec=(--spec draft --draft "$DRAFT" --spec-tokens "$DRAFT_TOKENS"
          --spec-vocab "${SPEC_VOCAB:-4096}" --spec-vocab-from "$SPEC_VOCAB_FROM")
        [ $kind = "draft-w${DRAFT_WIDTH:-1}" ] && spec=(--spec draft --draft "$DRAFT"
          --spec-tokens "$DRAFT_TOKENS" --draft-width "$DRAFT_WIDTH")
        TIMEFORMAT='%R %U %S'
        { time "$WEFT" sample "${args[@]}" "${spec[@]}" >out.$kind 2>err.$kind; } 2>time.$kind
        read -r r u s <time.$kind
        wall[$kind]+="$r " cpu[$kind]+="$(echo "$u + $s" | bc) "
      done
      for kind in "${kinds[@]}"; do
        cmp -s out.none out.$kind || { echo "MISMATCH: $prompt_kind $dtype $kind"; exit 1; }
      done
    done
    pw=$(median <<<"${wall[none]}") pc=$(median <<<"${cpu[none]}")
    for kind in "${kinds[@]}"; do
      sw=$(median <<<"${wall[$kind]}") sc=$(median <<<"${cpu[$kind]}")
      tau=$(grep -o "tau [0-9.]*" err.$kind | cut -d' ' -f2)
      acc=$(grep -o "[0-9]* of [0-9]* guessed" err.$kind | awk '{ printf "%d/%d", $1, $3 }')
      depth=$(grep -o "by depth:.*" err.$kind | cut -d: -f2)
      printf "%-10s %-4s %-8s %-6.2f %-6.2f %-7.2f %-6.2f %-6.2f %-7.2f %-5s %-8s%s\n" \
        $prompt_kind $dtype $kind "$pw" "$sw" "$(echo "$pw / $sw" | bc -l)" "$pc" "$sc" \
        "$(echo "$pc / $sc" | bc -l)" "$tau" "$acc" "$depth"
    done
  done
done
echo "load after: $(bench_load)"
