#!/usr/bin/env bash
# Measured pipeline bubble against the simulator's prediction, for each schedule, on this
# machine: bench/pipeline_bubble.sh [build dir] [pp] [micro-batches]
# Trains a small GPT (8 layers, width 512, T 256) for 4 steps per schedule with --trace and
# prints the last step's bubble: measured (1 - compute / (pp x step time)), simulated from the
# step's own mean forward/backward times per chunk, and the paper's formula.
set -euo pipefail
BUILD=${1:-build} PP=${2:-2} M=${3:-8}
WEFT=$(realpath "$BUILD/weft")
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out data --tokenizer-dir "$SRC/data" >/dev/null
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); pp $PP, $M micro-batches of 1 x 256 tokens, 1 thread per rank"
for sched in gpipe 1f1b interleaved; do
  extra=()
  [ $sched = interleaved ] && extra=(--vpp 2)
  mpirun -np "$PP" --bind-to none "$WEFT" train --model gpt2 --n-layer 8 --n-embd 512 --n-head 8 \
    --data data/tinyshakespeare_train.bin --batch-size "$M" --micro-batch-size 1 --seq-len 256 \
    --steps 4 --threads 1 --peak-gflops 100 --pp "$PP" --pp-schedule $sched "${extra[@]}" \
    --trace $sched.json --out run_$sched 2>&1 | grep -o "pipeline bubble.*" | sed "s/^/$sched: /"
done
