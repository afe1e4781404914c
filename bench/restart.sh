#!/usr/bin/env bash
# Time to restart after a kill (docs/performance.md, "Checkpoints"): gpt2 124M on 2 data-parallel
# ranks (ZeRO 1, one thread each) under `weft run`, rank 1 killed (SIGKILL, WEFT_TEST_FAULT) at
# step 4, after the step-2 checkpoint was committed. Reports, from the fault report's clocks:
# kill -> detected, kill -> first step of the new attempt finished, and that step's own time,
# so what is left is mpirun's teardown, the new start-up and loading the checkpoint.
#
#   bench/restart.sh [BUILD_DIR] [BATCH] [SEQ]      (defaults build, 2, 256)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
BATCH=${2:-2} SEQ=${3:-256}
bench_start "${1:-build}"
echo "load before: $(bench_load)"
WEFT_TEST_FAULT=kill:1:4 "$WEFT" run --grace 3 --max-restarts 1 -- \
  mpirun -np 2 --bind-to none "$WEFT" train --model gpt2 --data data/tinyshakespeare_train.bin \
  --batch-size "$BATCH" --seq-len "$SEQ" --steps 5 --save-every 2 --zero 1 --threads 1 \
  --out run >run.log 2>&1 || { tail -30 run.log; exit 1; }
field() { grep -o "\"$2\": *[^,}]*" "$1" | head -1 | sed -E 's/^[^:]*: *//; s/"//g'; }
killed=$(grep -o 'stops at [0-9.]*' run.log | head -1 | awk '{print $3}')
report=run/faults/attempt_0.json
detected=$(field $report detected_at)
first=$(field $report first_step_at)
# The redone step 3 is the first step line of the new attempt in metrics.jsonl.
step3=$(grep '"step": *3,' run/metrics.jsonl | grep '"loss"' | tail -1 |
  grep -o '"step_time_s": *[0-9.]*' | sed 's/.*: *//')
awk -v k="$killed" -v d="$detected" -v f="$first" -v s="$step3" 'BEGIN {
  printf "kill -> detected %.3f s\nkill -> first new step finished %.2f s\n", d - k, f - k
  printf "  of which the redone step 3 %.2f s; teardown, start-up and loading %.2f s\n", s, f - k - s
}'
echo "checkpoint per rank: $(stat -c %s run/checkpoints/step_000002/rank_00000.bin) bytes"
echo "load after: $(bench_load)"
