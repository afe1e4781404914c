#!/usr/bin/env bash
# Tensor parallelism on this machine: gpt2 (124M), batch 4 x 1024 tokens, one process with two
# threads against tp 2 (one thread per rank), with and without sequence parallelism.
#   bench/tensor_parallel.sh [build dir] [steps]
# Prints the last step's tokens/s and the share of its time rank 0 spent in tensor-parallel
# collectives (which block: the next layer needs their result), the bus bytes rank 0 sent in them,
# and rank 0's peak resident memory by the end of that step (before the final checkpoint).
set -euo pipefail
BUILD=${1:-build} STEPS=${2:-3}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
args=(--model gpt2 --data data/tinyshakespeare_train.bin --batch-size 4 --seq-len 1024
      --steps "$STEPS" --peak-gflops 1)
echo "load before: $(bench_load)"
field() { grep "\"step\":$STEPS," "$1/metrics.jsonl" | grep -o "\"$2\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
report() {  # report <name> <run dir>
  local tps dt rss tp share="-" bus="-"
  tps=$(field "$2" tokens_per_s) dt=$(field "$2" step_time_s) rss=$(field "$2" peak_rss_bytes)
  tp=$(grep "\"step\":$STEPS," "$2/metrics.jsonl" | grep -o '"tp":{.*' | grep -o '"total":{[^}]*}' | head -1 || true)
  if [ -n "$tp" ]; then
    share=$(echo "$tp" | grep -o '"seconds":[0-9.e+-]*' | cut -d: -f2)
    share=$(awk "BEGIN { printf \"%.1f%%\", 100 * $share / $dt }")
    bus=$(echo "$tp" | grep -o '"bus_bytes":[0-9.e+-]*' | cut -d: -f2)
    bus=$(awk "BEGIN { printf \"%.0f MB\", $bus / 1e6 }")
  fi
  printf "%-26s %6.0f tokens/s  step %5.2f s  tp communication %5s  bus bytes %7s  peak RSS %5.0f MiB\n" \
    "$1" "$tps" "$dt" "$share" "$bus" "$(awk "BEGIN { print $rss / 1048576 }")"
}
OMP_NUM_THREADS=2 "$WEFT" train "${args[@]}" --threads 2 --out one >/dev/null
report "1 process, 2 threads" one
mpirun -np 2 --bind-to none "$WEFT" train "${args[@]}" --threads 1 --tp 2 --out tp2 >/dev/null
report "tp 2, 1 thread per rank" tp2
mpirun -np 2 --bind-to none "$WEFT" train "${args[@]}" --threads 1 --tp 2 --sequence-parallel --out tp2sp >/dev/null
report "tp 2 + sequence parallel" tp2sp
echo "load after: $(bench_load)"
