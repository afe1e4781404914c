#!/usr/bin/env bash
# bf16 on the wire (issue 16): bf16_comm.sh <weft> <dp_check> <source dir> <mode>
#   tp      --dtype bf16 at tp 2, with and without sequence parallelism, against one process in
#           bf16: every step's loss and gradient norm within 2e-3 relative (measured: 8e-6 and
#           4e-4; each all-reduce, all-gather and reduce-scatter of activations rounds them to
#           bf16 once more than the single process does, a 2^-9 relative step; a wrong sum or a
#           block in the wrong place is off by far more). Without sequence parallelism, rank 0's
#           tp bytes on the wire are exactly half the fp32 run's, less the softmax sums that stay
#           fp32 (with it, docs/tensor_parallel.md has the measured halving).
#   pp      --dtype bf16 at pp 2 against one process in bf16 (2e-3), and the pipeline's bytes
#           exactly half, less the tied embedding's gradient exchange that stays fp32; with
#           --grad-reduce-dtype bf16 as well, all of them exactly half.
#   dp      --grad-reduce-dtype bf16 at dp 2 under ZeRO 0 (the whole buffer: all-to-all, fp32
#           sums, all-gather) and ZeRO 2 (the shard: all-to-all, fp32 sums) against one process
#           in fp32 (2e-3; measured 2e-6 and 2e-4: each gradient is rounded to bf16 before the
#           fp32 sum, and the sum once more at ZeRO 0-1), and at ZeRO 0 the dp bytes exactly half.
#           (ZeRO 1 and 3 run the same two paths; measured 2e-6 and 2e-4 too.)
#   layouts --dtype bf16 in the layouts the modes above leave out, against one process in bf16
#           (2e-3, as above): dp 2 at ZeRO 0, 1, 2 and 3, and pp 2 under GPipe and interleaved
#           (vpp 2), on 4 layers so that the interleaved pipeline has two chunks a rank. The
#           ranks round the same operands as one process; what differs is the order of the fp32
#           sums (dp's reduction, the pipeline's micro-batches), which can flip a later
#           operand's bf16 rounding (measured: loss 8.5e-7 and gradient norm 2.6e-5 at every
#           ZeRO stage, 5e-6 and 3.4e-4 / 5e-5 under GPipe / interleaved).
#   errors  a bad --grad-reduce-dtype: one clear error before the run directory exists.
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3 MODE=$4
source "$SRC/tests/mpi/train_lib.sh"
# Three steps (and train_lib's one evaluation batch): each run is a few seconds.
steps=3

ref() {  # ref <out> args...: one process
  "$WEFT" train "${args[@]}" --steps $steps --out "$1" "${@:2}" >"$1.log" 2>&1 || { cat "$1.log"; exit 1; }
}

case $MODE in
tp)
  ref ref_bf16 --dtype bf16
  train 2 tp2_bf16 --steps $steps --tp 2 --dtype bf16
  train 2 tp2_sp_bf16 --steps $steps --tp 2 --sequence-parallel --dtype bf16
  train 2 tp2_fp32 --steps $steps --tp 2
  check "$CHECK" losses ref_bf16 tp2_bf16 2e-3
  check "$CHECK" losses ref_bf16 tp2_sp_bf16 2e-3
  check "$CHECK" wire tp2_fp32 tp2_bf16 tp all_reduce
  ;;
pp)
  ref ref_bf16 --dtype bf16
  train 2 pp2_bf16 --steps $steps --pp 2 --micro-batch-size 2 --dtype bf16
  train 2 pp2_fp32 --steps $steps --pp 2 --micro-batch-size 2
  check "$CHECK" losses ref_bf16 pp2_bf16 2e-3
  check "$CHECK" wire pp2_fp32 pp2_bf16 pp tied
  # With --grad-reduce-dtype bf16 the tied embedding's gradient travels as bf16 too: all of it.
  train 2 pp2_bf16_grads --steps $steps --pp 2 --micro-batch-size 2 --dtype bf16 \
    --grad-reduce-dtype bf16
  check "$CHECK" losses ref_bf16 pp2_bf16_grads 2e-3
  check "$CHECK" wire pp2_fp32 pp2_bf16_grads pp 0
  ;;
dp)
  ref ref
  for zero in 0 2; do
    train 2 dp2_zero${zero}_bf16 --steps $steps --zero $zero --grad-reduce-dtype bf16
    check "$CHECK" losses ref dp2_zero${zero}_bf16 2e-3
  done
  train 2 dp2_zero0_fp32 --steps $steps --zero 0
  check "$CHECK" wire dp2_zero0_fp32 dp2_zero0_bf16 dp all_reduce
  ;;
layouts)
  args+=(--n-layer 4)
  ref ref_bf16 --dtype bf16
  for zero in 0 1 2 3; do
    train 2 dp2_zero${zero}_bf16 --steps $steps --zero $zero --dtype bf16
    check "$CHECK" losses ref_bf16 dp2_zero${zero}_bf16 2e-3
  done
  for sched in gpipe interleaved; do
    extra=()
    [ $sched = interleaved ] && extra=(--vpp 2)
    train 2 pp2_${sched}_bf16 --steps $steps --pp 2 --pp-schedule $sched --micro-batch-size 2 \
      --dtype bf16 "${extra[@]}"
    check "$CHECK" losses ref_bf16 pp2_${sched}_bf16 2e-3
  done
  ;;
errors)
  expect_error 2 "--grad-reduce-dtype must be fp32 or bf16, got 'fp16'" --grad-reduce-dtype fp16
  ;;
*)
  echo "unknown mode $MODE"
  exit 2
  ;;
esac
finish
