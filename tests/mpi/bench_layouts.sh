#!/usr/bin/env bash
# `weft bench train` runs the layouts `weft train` runs: one process, tensor parallel with
# sequence parallelism, an interleaved pipeline and context parallelism (TokenRing and
# Ulysses, whose cp sends per step are counted), each timing the same global batch; the
# model state per rank shrinks as the layout splits it; impossible layouts fail before any work.
#   bash tests/mpi/bench_layouts.sh <weft>
set -uo pipefail
WEFT=$1
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_env.sh"
failures=0
check() { "$@" || { echo "FAILED: $*"; failures=$((failures + 1)); }; }
common=(--preset tiny --n-layer 4 --batch-size 8 --seq-len 32 --steps 1 --peak-gflops 10
        --threads 1 --json)
field() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -1 | cut -d: -f2- | tr -d '"'; }

bench() {  # bench <np> args...: the JSON line of rank 0
  local out
  out=$(mpirun -np "$1" "$WEFT" bench train "${common[@]}" "${@:2}" 2>&1)
  [ $? -eq 0 ] || { echo "FAILED: mpirun -np $1 weft bench train ${*:2}:"; echo "$out"; failures=$((failures + 1)); }
  tail -1 <<<"$out"
}
one=$(bench 1)
tp=$(bench 2 --tp 2 --sequence-parallel)
pp=$(bench 2 --pp 2 --pp-schedule interleaved --vpp 2 --micro-batch-size 2)
token=$(bench 2 --cp 2 --ring-bidirectional)
ulysses=$(bench 2 --cp 2 --cp-kind ulysses)
for j in "$one" "$tp" "$pp" "$token" "$ulysses"; do
  echo "$(field "$j" layout): $(field "$j" micro_batches) x $(field "$j" micro_batch_size), $(field "$j" tokens_per_s) tokens/s, model state $(field "$j" model_state_bytes) B, estimate $(field "$j" estimate_bytes) B"
done
check [ "$(field "$one" layout)" = "dp=1 tp=1 pp=1 cp=1 ep=1 zero=0" ]
check [ "$(field "$tp" layout)" = "dp=1 tp=2 pp=1 cp=1 ep=1 zero=0 sp" ]
check [ "$(field "$pp" layout)" = "dp=1 tp=1 pp=2 cp=1 ep=1 zero=0 interleaved vpp=2" ]
check [ "$(field "$token" layout)" = "dp=1 tp=1 pp=1 cp=2 ep=1 zero=0 ring bidirectional" ]
check [ "$(field "$ulysses" layout)" = "dp=1 tp=1 pp=1 cp=2 ep=1 zero=0 ulysses" ]
# The cp sends of one step (docs/context_parallel.md): TokenRing, 4 layers x (rows 8 x 32/2) x
# (6C + 2 heads) floats; Ulysses, 4 layers x 8 all-to-alls of rows x C floats.
cp_bytes() { grep -o '"cp":{.*' <<<"$1" | grep -o "\"$2\":{[^}]*}" | grep -o '"bytes":[0-9]*' | cut -d: -f2; }
check [ "$(cp_bytes "$token" send)" = $((4 * 128 * (6 * 64 + 2 * 4) * 4)) ]
check [ "$(cp_bytes "$ulysses" all_to_all)" = $((4 * 8 * 128 * 64 * 4)) ]
check [ "$(field "$pp" micro_batches)" = 4 ]
check [ "$(field "$pp" ranks)" = 2 ]
# Every layout times the whole global batch: tokens per step are the same.
for j in "$one" "$tp" "$pp" "$token" "$ulysses"; do
  check awk -v t="$(field "$j" tokens_per_s)" -v s="$(field "$j" step_s)" \
    'BEGIN { exit !(t > 0 && (t * s - 256) ^ 2 < 1e-6) }'
done
# Tensor parallelism halves most of the model state (tiny's replicated LayerNorms, wpe and
# biases keep it a little above one half); a pipeline stage holds half the layers, but the tied
# embedding, nearly all of tiny's parameters, sits on both ends.
ratio() { awk -v a="$(field "$1" model_state_bytes)" -v b="$(field "$one" model_state_bytes)" \
  -v lo="$2" -v hi="$3" 'BEGIN { r = a / b; print r; exit !(r > lo && r < hi) }'; }
check ratio "$tp" 0.49 0.6
check ratio "$pp" 0.9 0.999

# --grad-reduce-dtype bf16 at dp 2: the gradients' bytes on the dp wire halve (an all-to-all and
# an all-gather of bf16 in place of the fp32 all-reduce; the 16-byte loss sum stays fp32).
dp_fp32=$(bench 2 --dp 2)
dp_bf16=$(bench 2 --dp 2 --grad-reduce-dtype bf16)
dp_bus() { grep -o '"dp":{.*' <<<"$1" | grep -o '"total":{[^}]*}' | head -1 | grep -o '"bus_bytes":[0-9.e+]*' | cut -d: -f2; }
echo "dp 2 gradient bus bytes per step: fp32 $(dp_bus "$dp_fp32"), bf16 $(dp_bus "$dp_bf16")"
check [ "$(field "$dp_bf16" grad_reduce_dtype)" = bf16 ]
check awk -v a="$(dp_bus "$dp_fp32")" -v b="$(dp_bus "$dp_bf16")" \
  'BEGIN { exit !(a > 16 && (b - 16) * 2 == a - 16) }'

expect_error() {  # expect_error <np> <message> args...
  local out rc
  out=$(mpirun -np "$1" "$WEFT" bench train "${common[@]}" "${@:3}" 2>&1)
  rc=$?
  grep -F "error" <<<"$out" | head -1
  check [ $rc -ne 0 ]
  check grep -qF -- "$2" <<<"$out"
}
expect_error 2 "micro-batches per step = --batch-size 8 / (--micro-batch-size 8 x dp 1) = 1" \
  --pp 2 --pp-schedule interleaved --vpp 2
expect_error 1 "--sequence-parallel needs --tp greater than 1" --sequence-parallel
expect_error 1 "--grad-reduce-dtype: fp16 not in {fp32,bf16}" --grad-reduce-dtype fp16
expect_error 2 "world size 2 is not divisible by tp*pp*cp = 4*1*1 = 4" --tp 4
expect_error 2 "sequence length T=30 must be a positive multiple of 2*cp=4 (cp=2)" \
  --cp 2 --seq-len 30
echo "$failures failed"
[ "$failures" -eq 0 ]
