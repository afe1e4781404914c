#!/usr/bin/env bash
# Context parallelism (ring attention over zigzag chunks, and Ulysses) against the single-process
# run: every step's loss within 1e-5 (relative), final weights within 1e-4, as dp_train.sh and
# llama_train.sh check the other layouts. T = 64 so that cp 4 has chunks of 8 positions.
# cp_train.sh <weft> <dp_check> <source dir> <mode>
#   gpt2     tiny GPT-2 at cp 2 and cp 4, ring and ulysses; Ulysses makes 8 all-to-alls per
#            layer and step (4 forward, 4 backward) of B x T/cp x C floats each
#   llama    llama-tiny (8 heads sharing 4 kv heads, RoPE) at cp 2 and cp 4, ring and ulysses
#   dp       cp 2 x dp 2, llama-tiny: ring at ZeRO 1 (with gradient accumulation), ulysses at
#            ZeRO 3; cp 2 with --recompute
#   pp_tp    cp 2 x pp 2: GPT-2 (4 layers, interleaved, ring) and llama-tiny (1F1B, Ulysses);
#            cp 2 x tp 2 with sequence parallelism: GPT-2 ring (micro-batches of one sequence,
#            so that a tp rank's rows start mid-sequence) and llama-tiny Ulysses; the final
#            evaluation within 1e-5 too
#   resume   4 steps at cp 2, 3 more at cp 1, against an uninterrupted run; the clear errors
#            (also those cp x tp keeps: Ulysses heads per tp rank, rows under SP)
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3 MODE=$4
source "$SRC/tests/mpi/train_lib.sh"
for i in "${!args[@]}"; do [ "${args[$i]}" = --seq-len ] && args[$((i + 1))]=64; done

val_loss() { grep -o '"val_loss":[-0-9.e+]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
same_val_loss() {  # same_val_loss <run> <ref>: the last evaluation within 1e-5 (relative)
  local a b
  a=$(val_loss "$1") b=$(val_loss "$2")
  echo "$1 vs $2: val loss $a vs $b"
  check awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * b) }'
}

step_all_to_alls() {  # step_all_to_alls <run>: "calls bytes" of the cp all-to-alls, per step
  grep '"tokens_per_s"' "$1/metrics.jsonl" | grep -o '"all_to_all":{[^}]*}' \
    | sed -E 's/.*"bytes":([0-9]+),"calls":([0-9]+).*/\2 \1/'
}

reference() {  # reference <name> args...: the single-process run
  local name=$1
  shift
  "$WEFT" train "${args[@]}" "$@" --out "$name" >"$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}

case $MODE in
gpt2 | llama)
  [ "$MODE" = llama ] && args+=(--model llama-tiny)
  reference ref --steps 5
  for kind in ring ulysses; do
    for cp in 2 4; do
      train $cp ${kind}$cp --steps 5 --cp $cp --cp-kind $kind
      same_as_ref ${kind}$cp ref
      check grep -q '^cp ' ${kind}$cp.log  # the cp axis in the communication table
      if [ "$MODE$kind" = gpt2ulysses ]; then
        # tiny: 2 layers, C = 64; batch 8 of T = 64 in one micro-batch; fp32.
        want="5 $((2 * 8)) $((2 * 8 * 8 * 64 / cp * 64 * 4))"
        got=$(step_all_to_alls ${kind}$cp | uniq -c | sed 's/^ *//')
        echo "ulysses cp $cp: steps, all-to-all calls and bytes of each: $got (expected $want)"
        check [ "$got" = "$want" ]
      fi
    done
  done
  ;;
dp)
  args+=(--model llama-tiny)
  reference ref --steps 5
  train 4 cp2_dp2_zero1 --steps 5 --cp 2 --zero 1 --micro-batch-size 2
  same_as_ref cp2_dp2_zero1 ref
  train 4 cp2_dp2_zero3 --steps 5 --cp 2 --zero 3 --cp-kind ulysses
  same_as_ref cp2_dp2_zero3 ref
  # Recomputation re-runs the ring in backward: every cp rank must do so in step.
  train 2 cp2_recompute --steps 5 --cp 2 --recompute
  same_as_ref cp2_recompute ref
  ;;
pp_tp)
  # Every stage's ranks hold the same zigzag rows; the pipeline carries cp-local activations.
  # Under tp the cp group is one tp rank's: the ring or the all-to-alls run over its heads.
  reference ref4 --steps 5 --n-layer 4
  train 4 cp2_pp2_gpt2 --steps 5 --n-layer 4 --cp 2 --pp 2 --pp-schedule interleaved --vpp 2 \
    --micro-batch-size 2
  train 4 cp2_tp2_sp_gpt2 --steps 5 --n-layer 4 --cp 2 --tp 2 --sequence-parallel \
    --micro-batch-size 1
  for run in cp2_pp2_gpt2 cp2_tp2_sp_gpt2; do
    same_as_ref $run ref4
    same_val_loss $run ref4
  done
  args+=(--model llama-tiny)
  reference ref --steps 5
  train 4 cp2_pp2_llama --steps 5 --cp 2 --pp 2 --pp-schedule 1f1b --cp-kind ulysses \
    --micro-batch-size 2
  train 4 cp2_tp2_sp_llama --steps 5 --cp 2 --tp 2 --sequence-parallel --cp-kind ulysses
  for run in cp2_pp2_llama cp2_tp2_sp_llama; do
    same_as_ref $run ref
    same_val_loss $run ref
  done
  ;;
resume)
  reference straight --steps 7
  train 2 hop --steps 7 --cp 2 --exit-after 4
  train 1 hop --steps 7 --resume
  check "$CHECK" losses straight hop 1e-5
  check "$CHECK" weights "$(ckpt straight 7)" "$(ckpt hop 7)" 1e-4
  expect_error 2 "--seq-len 62 with --cp 2: context parallelism cuts every sequence into 2 x cp = 4" --cp 2 --seq-len 62
  expect_error 2 "--cp-kind must be ring or ulysses, got 'spiral'" --cp 2 --cp-kind spiral
  expect_error 4 "this rank's 2 heads and 2 key/value heads (of 2 and 2 over --tp 1) must both be multiples of it" \
    --cp 4 --cp-kind ulysses --n-head 2
  expect_error 3 "world size 3 is not divisible by tp*pp*cp*ep" --cp 2
  # cp composes with tp and pp; what remains refused is what cannot split evenly.
  expect_error 4 "this rank's 1 heads and 1 key/value heads (of 2 and 2 over --tp 2) must both" \
    --cp 2 --tp 2 --cp-kind ulysses --n-head 2
  expect_error 8 "a rank holds micro-batch 1 x --seq-len 36 / cp = 18 rows" \
    --cp 2 --tp 4 --sequence-parallel --seq-len 36 --micro-batch-size 1
  ;;
*)
  echo "unknown mode $MODE"
  exit 2
  ;;
esac
finish
