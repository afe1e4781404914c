#!/usr/bin/env bash
# Parallel Prompt Decoding at batch 1 (docs/decoding.md): plain greedy against --spec ppd on a
# trained checkpoint and its prompt tokens (weft train --ppd-tokens), for plain prose (a
# held-out passage) and a repetitive prompt (the passage twice), fp32 and bf16, with M guesses a
# step (--spec-tokens) for each M given.
#   bench/ppd.sh <build dir> <checkpoint> <ppd run> [tokens] [M...]   (default 256 tokens; M 1 3)
# One OpenMP thread a process, so that CPU seconds measure the work on a loaded machine; prints
# the decode seconds `weft sample` reports (first token to last: start-up, loading and the
# prompt's forward left out) and their speedup, the speedup in the whole process's CPU seconds,
# tau and the acceptance by depth, and checks that both texts are the same. With
# SPEC_VOCAB_FROM=<token file> (the training data) each M runs a second time with the prompt
# rows over its --spec-vocab (SPEC_VOCAB, default 4096) most frequent ids (vocab column: that
# size; "all" is the whole vocabulary), back to back with the first. With TREES="0 8" (default
# 0) each M runs once a tree size: --spec-tree N, a sparse tree of N guesses at most M deep
# chosen from the rates `weft ppd-acceptance` saved beside the prompts (default rates when none
# were measured); 0 is the chain of M argmaxes.
set -euo pipefail
BUILD=${1:?build dir} CKPT=$(realpath "${2:?checkpoint}") PPD=$(realpath "${3:?ppd run}")
TOKENS=${4:-256}
shift $(($# < 4 ? $# : 4))
[ $# -gt 0 ] && GUESSES=("$@") || GUESSES=(1 3)
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
export OMP_NUM_THREADS=1
echo "load: $(bench_load); $TOKENS tokens, greedy, one thread"
# Runs weft sample with the arguments; prints "<decode s> <cpu s>", the text into $1.
timed() {
  local out=$1; shift
  /usr/bin/time -o cpu.txt -f "%U %S" "$WEFT" sample "$@" >"$out" 2>>err
  echo "$(grep -o "decode [0-9.]* s" err | tail -1 | cut -d' ' -f2) $(awk '{ print $1 + $2 }' cpu.txt)"
}
printf "%-11s %-5s %-2s %-4s %-5s %-7s %-7s %-7s %-7s %-5s %s\n" prompt dtype M tree vocab \
  plain_s ppd_s speedup cpu_x tau "accepted by depth"
for dtype in fp32 bf16; do
  for kind in prose repetitive; do
    bench_decode_args "$CKPT" $kind "$TOKENS" $dtype
    : >err
    read -r pd pc < <(timed plain.txt "${args[@]}")
    vocabs=(all)
    [ -n "${SPEC_VOCAB_FROM:-}" ] && vocabs+=("${SPEC_VOCAB:-4096}")
    for m in "${GUESSES[@]}"; do
      for tree in ${TREES:-0}; do
        for vocab in "${vocabs[@]}"; do
          : >err
          sl=()
          [ "$vocab" != all ] && sl=(--spec-vocab "$vocab" --spec-vocab-from "$SPEC_VOCAB_FROM")
          read -r sd sc < <(timed ppd.txt "${args[@]}" --spec ppd --ppd "$PPD" --spec-tokens "$m" --spec-tree "$tree" "${sl[@]}")
          cmp -s plain.txt ppd.txt || { echo "MISMATCH: $kind $dtype M $m tree $tree vocab $vocab"; exit 1; }
          tau=$(grep -o "tau [0-9.]*" err | cut -d' ' -f2)
          depth=$(grep -o "by depth:.*" err | cut -d: -f2 || true)
          printf "%-11s %-5s %-2s %-4s %-5s %-7.3f %-7.3f %-7.2f %-7.2f %-5s %s\n" $kind $dtype \
            $m $tree $vocab "$pd" "$sd" "$(echo "$pd / $sd" | bc -l)" "$(echo "$pc / $sc" | bc -l)" \
            "$tau" "$depth"
        done
      done
    done
  done
done
echo "load after: $(bench_load)"
