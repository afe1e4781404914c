#!/usr/bin/env bash
# Speculative decoding at batch 1 (docs/decoding.md): plain greedy against --spec ngram, and
# against --spec draft when a draft checkpoint is given, on a trained checkpoint, for a
# repetitive prompt (a held-out passage given twice, so that the continuation can copy) and for
# plain prose (the passage once), in fp32 and bf16.
#   bench/decoding.sh <build dir> <checkpoint> [tokens] [draft checkpoint]
# (default 256 tokens, past the end of text; DRAFT_TOKENS guesses a step for the draft,
# NGRAM_TOKENS for ngram, default each --spec-tokens' default; REPS rounds, default 3). Each
# round runs plain, ngram and draft back to back, so that the load of other jobs falls alike on
# the three; per case the median over rounds of the decode seconds `weft sample` prints (first
# token to last: start-up, loading and the prompt's forward left out) and their speedup, the
# speedup of the whole process's wall seconds, tokens per forward (tau), the share of guesses
# accepted and, per depth, kept / guessed. Fails if a text differs from plain greedy's. With
# SPEC_VOCAB_FROM=<token file> (the training data), the draft runs a second time proposing from
# its --spec-vocab (SPEC_VOCAB, default 4096) most frequent ids ("draft-sl"). With DRAFT_WIDTH=W above 1 it runs once more with --draft-width W
# ("draft-wW": the draft's W best ids at each depth, the others leaves beside its chain).
set -euo pipefail
BUILD=${1:?build dir} CKPT=$(realpath "${2:?checkpoint}") TOKENS=${3:-256}
DRAFT=${4:+$(realpath "$4")} REPS=${REPS:-3}
ngram_n=(${NGRAM_TOKENS:+--spec-tokens "$NGRAM_TOKENS"})
draft_n=(${DRAFT_TOKENS:+--spec-tokens "$DRAFT_TOKENS"})
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
echo "load: $(bench_load); $TOKENS tokens, greedy, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all cores}, $REPS rounds"
kinds=(ngram)
[ -n "$DRAFT" ] && kinds+=(draft)
[ -n "$DRAFT" ] && [ -n "${SPEC_VOCAB_FROM:-}" ] && kinds+=(draft-sl)
[ -n "$DRAFT" ] && [ "${DRAFT_WIDTH:-1}" -gt 1 ] && kinds+=("draft-w$DRAFT_WIDTH")
median() { tr ' ' '\n' | sort -g | awk 'NF { a[++n] = $1 } END { print a[int((n + 1) / 2)] }'; }
# The decode seconds of a run's stderr.
decode_s() { grep -o "decode [0-9.]* s" "$1" | cut -d' ' -f2; }
printf "%-10s %-4s %-8s %-7s %-7s %-7s %-6s %-5s %-8s %s\n" prompt dtype spec plain_s spec_s \
  speedup wall_x tau accepted "kept/guessed by depth"
for dtype in fp32 bf16; do
  for prompt_kind in repetitive prose; do
    bench_decode_args "$CKPT" $prompt_kind "$TOKENS" $dtype
    declare -A wall=() dec=()
    for rep in $(seq "$REPS"); do
      for kind in none "${kinds[@]}"; do
        spec=()
        [ $kind = ngram ] && spec=(--spec ngram "${ngram_n[@]}")
        [ $kind = draft ] && spec=(--spec draft --draft "$DRAFT" "${draft_n[@]}")
        [ $kind = draft-sl ] && spec=(--spec draft --draft "$DRAFT" "${draft_n[@]}"
          --spec-vocab "${SPEC_VOCAB:-4096}" --spec-vocab-from "$SPEC_VOCAB_FROM")
        [ $kind = "draft-w${DRAFT_WIDTH:-1}" ] && spec=(--spec draft --draft "$DRAFT"
          "${draft_n[@]}" --draft-width "$DRAFT_WIDTH")
        TIMEFORMAT='%R'
        { time "$WEFT" sample "${args[@]}" "${spec[@]}" >out.$kind 2>err.$kind; } 2>time.$kind
        wall[$kind]+="$(cat time.$kind) " dec[$kind]+="$(decode_s err.$kind) "
      done
      for kind in "${kinds[@]}"; do
        cmp -s out.none out.$kind || { echo "MISMATCH: $prompt_kind $dtype $kind"; exit 1; }
      done
    done
    pw=$(median <<<"${wall[none]}") pd=$(median <<<"${dec[none]}")
    for kind in "${kinds[@]}"; do
      sw=$(median <<<"${wall[$kind]}") sd=$(median <<<"${dec[$kind]}")
      tau=$(grep -o "tau [0-9.]*" err.$kind | cut -d' ' -f2)
      acc=$(grep -o "[0-9]* of [0-9]* guessed" err.$kind | awk '{ printf "%d/%d", $1, $3 }')
      depth=$(grep -o "by depth:.*" err.$kind | cut -d: -f2)
      printf "%-10s %-4s %-8s %-7.3f %-7.3f %-7.2f %-6.2f %-5s %-8s%s\n" \
        $prompt_kind $dtype $kind "$pd" "$sd" "$(echo "$pd / $sd" | bc -l)" \
        "$(echo "$pw / $sw" | bc -l)" "$tau" "$acc" "$depth"
    done
  done
done
echo "load after: $(bench_load)"
