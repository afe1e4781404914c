#!/usr/bin/env bash
# The set-up the benchmark scripts share. Source it, then call bench_start with the build
# directory: it sets WEFT (the binary), BUILD_DIR and SRC (absolute), moves into a scratch
# directory WORK that is removed on exit, lets Open MPI run as root and start more ranks than
# cores, and tokenises tinyshakespeare into data/ (data/tinyshakespeare_train.bin).

bench_start() {  # bench_start <build dir>
  WEFT=$(realpath "$1/weft")
  BUILD_DIR=$(realpath "$1")
  SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  "$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out data --tokenizer-dir "$SRC/data" \
    >/dev/null
}

# The 1-, 5- and 15-minute load averages: other jobs on the cores inflate every measured time.
bench_load() { cut -d' ' -f1-3 /proc/loadavg; }

# The decoding benchmarks' greedy `weft sample` arguments, in the array `args`, for a held-out
# prompt: the last 240 bytes of the corpus (its validation part) as plain prose, or given twice
# as a repetitive prompt whose continuation can copy. After bench_start:
#   bench_decode_args <checkpoint> <prose|repetitive> <tokens> <fp32|bf16>
# TOKENIZER names a Hugging Face tokenizer.json or its directory in place of the corpus's GPT-2
# files in data/, for a model trained with it (e.g. tests/data/tokenizers/smollm).
bench_decode_args() {
  local passage prompt
  passage=$(tail -c 240 "$SRC/data/tinyshakespeare.txt")
  prompt=$passage
  [ "$2" = repetitive ] && prompt="$passage
$passage"
  local tok=(--tokenizer-dir "$SRC/data")
  [ -n "${TOKENIZER:-}" ] && tok=(--tokenizer "$TOKENIZER")
  args=(--ckpt "$1" "${tok[@]}" --prompt "$prompt" --tokens "$3" --temperature 0
    --dtype "$4" --ignore-eos)
}
