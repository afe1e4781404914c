#!/usr/bin/env bash
# The Llama family (llama-tiny: 8 query heads sharing 4 key/value heads, untied head, RoPE,
# SwiGLU) end to end under every layout, against its single-process run: every step's loss
# within 1e-5 (relative), final weights within 1e-4, as dp_train.sh, tp_train.sh and
# pp_train.sh check GPT-2. llama_train.sh <weft> <dp_check> <source dir> <mode> [N]
#   dp N       dp N x ZeRO 0 (small buckets) and 3 (gradient accumulation); the stages between
#              run the same family-blind code GPT-2's dp_train covers
#   tp N       tp N with and without --sequence-parallel (kv heads split over tp); losses
#              within 1e-6
#   pp N       8 layers, pp N x 1f1b, interleaved (vpp 2) and zb-v: the family's part is how its
#              layers split into stages and chunks, which GPipe would repeat
#   mixed      tp 2 x dp 2 at ZeRO 3 with sequence parallelism, tp 2 x dp 2 x pp 2 (8 ranks,
#              which holds every pair of the three), dp 2 with --recompute, bf16 products at
#              tp 2 against bf16 in one process
#   resume     4 layers: 3 steps at one layout, 3 more at another (tp 2 -> pp 2 -> dp 2 ZeRO 3
#              -> one process), against an uninterrupted run; an HF export round trip
#   qwen2      qwen2-tiny (the same model with q/k/v biases) at tp 2 and pp 2, 3 steps; its HF
#              export read back at tp 2
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3 MODE=$4 N=${5:-}
MODEL=llama-tiny
[ "$MODE" = qwen2 ] && MODEL=qwen2-tiny
source "$SRC/tests/mpi/train_lib.sh"

reference() {  # reference <name> args...: the single-process run
  local name=$1
  shift
  "$WEFT" train "${args[@]}" "$@" --out "$name" >"$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}

case $MODE in
dp)
  reference ref --steps 5
  for zero in 0 3; do
    extra=()
    [ $zero -eq 0 ] && extra+=(--bucket-mb 0.05)
    [ $zero -eq 3 ] && extra+=(--micro-batch-size $((8 / N / 2)))
    train "$N" dp${N}_zero$zero --steps 5 --zero $zero "${extra[@]}"
    same_as_ref dp${N}_zero$zero ref
  done
  ;;
tp)
  # Losses within 1e-6, not 1e-5: issue 31 saw tp 2 off by 2.3e-6, which 1e-5 let pass. Only the
  # order of the ranks' partial sums differs (docs/tensor_parallel.md), as for GPT-2: measured
  # 3.8e-9 (grad norm 2.3e-8) at tp 2, as tiny GPT-2's 6e-9 (1.4e-7).
  reference ref --steps 5
  for sp in "" --sequence-parallel; do
    train "$N" tp${N}${sp:+_sp} --steps 5 --tp "$N" $sp
    same_as_ref tp${N}${sp:+_sp} ref 5 1e-6
  done
  ;;
pp)
  args+=(--n-layer 8)
  reference ref --steps 5
  for sched in 1f1b interleaved zb-v; do
    extra=()
    [ $sched = interleaved ] && extra+=(--vpp 2)
    train "$N" pp${N}_$sched --steps 5 --pp "$N" --pp-schedule $sched --micro-batch-size 1 "${extra[@]}"
    same_as_ref pp${N}_$sched ref
  done
  ;;
mixed)
  args+=(--n-layer 4)
  reference ref --steps 5
  train 4 tp2_dp2_zero3 --steps 5 --tp 2 --zero 3 --micro-batch-size 2 --sequence-parallel
  same_as_ref tp2_dp2_zero3 ref
  # All three at once, so every pair too: 8 ranks, tp 2 x dp 2 x pp 2.
  train 8 tp2_dp2_pp2 --steps 5 --tp 2 --pp 2 --zero 1 --micro-batch-size 1 --sequence-parallel
  same_as_ref tp2_dp2_pp2 ref
  train 2 dp2_recompute --steps 5 --recompute --micro-batch-size 2
  same_as_ref dp2_recompute ref
  # bf16 products: the same model in bf16 at tp 2 as in one process (rounding differs only
  # by the order of the partial sums). Such a difference can flip an operand's bf16 rounding (a
  # 2^-8 step), so the gradient norm moves more than in fp32: 1.8e-3 measured with emulated bf16
  # (an AVX2-only CPU), while the losses agree to 7e-6. A wrong reduction is off by far more.
  reference ref_bf16 --steps 5 --dtype bf16
  train 2 tp2_bf16 --steps 5 --tp 2 --dtype bf16
  check "$CHECK" losses ref_bf16 tp2_bf16 5e-3
  ;;
resume)
  args+=(--n-layer 4)
  reference straight --steps 8
  train 2 hop --steps 8 --tp 2 --exit-after 2
  train 2 hop --steps 8 --pp 2 --micro-batch-size 2 --exit-after 4 --resume
  train 2 hop --steps 8 --zero 3 --exit-after 6 --resume
  train 1 hop --steps 8 --resume
  check "$CHECK" losses straight hop 1e-5
  check "$CHECK" weights "$(ckpt straight 8)" "$(ckpt hop 8)" 1e-4
  # A Hugging Face export (LlamaForCausalLM names) loads back into the same model.
  check "$WEFT" export --ckpt straight --out hf
  check grep -q '"architectures": \[' hf/config.json
  check grep -q '"LlamaForCausalLM"' hf/config.json
  train 1 from_hf --steps 1 --model-dir hf --lr 1e-30 --weight-decay 0
  check "$CHECK" weights "$(ckpt straight 8)" "$(ckpt from_hf 1)" 1e-6
  ;;
qwen2)
  # Only the biases are new: tp splits them like the rows of q/k/v, pp keeps them in their
  # layer's unit. They start at zero and move from the first step, so steps 2 and 3 read them.
  reference ref --steps 3
  train 2 tp2 --steps 3 --tp 2
  same_as_ref tp2 ref 3 1e-6
  train 2 pp2 --steps 3 --pp 2 --micro-batch-size 1
  same_as_ref pp2 ref 3
  # A Hugging Face export (Qwen2ForCausalLM names), its biases no longer zero, loads back into
  # the same model at tp 2.
  check "$WEFT" export --ckpt ref --out hf
  check grep -q '"Qwen2ForCausalLM"' hf/config.json
  train 2 from_hf --steps 1 --model-dir hf --tp 2 --lr 1e-30 --weight-decay 0
  check "$CHECK" weights "$(ckpt ref 3)" "$(ckpt from_hf 1)" 1e-6
  ;;
*)
  echo "unknown mode $MODE"
  exit 2
  ;;
esac
finish
