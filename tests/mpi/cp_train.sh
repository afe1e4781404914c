#!/usr/bin/env bash
# Context parallelism (ring attention over zigzag chunks, and Ulysses) against the single-process
# run: every step's loss within 1e-5 (relative), final weights within 1e-4, as dp_train.sh and
# llama_train.sh check the other layouts. T = 64 so that cp 4 has chunks of 8 positions. Each mode
# runs one single-process reference that all its cases compare with, for 5 steps (as issue 13
# asks), and evaluates 2 batches.
# cp_train.sh <weft> <dp_check> <source dir> <mode>
#   gpt2     tiny GPT-2 with 4 layers: Ulysses at cp 4 (8 all-to-alls per layer and step, 4
#            forward and 4 backward, of B x T/cp x C floats each); the hybrid at cp 4 = 2 x 2
#            (Ulysses in pairs of ranks, the ring across the pairs); ring at cp 2 x pp 2
#            (interleaved) and at cp 2 x tp 2 with sequence parallelism (micro-batches of one
#            sequence, so that a tp rank's rows start mid-sequence), the final evaluation within
#            1e-5 too; resume: 2 steps at cp 2 (ring), the rest at cp 1; TokenRing
#            (--ring-bidirectional) at cp 4, its cp sends each step exactly the analytic
#            count (queries out, partial results back; docs/context_parallel.md), and its
#            --trace timeline shows each of those sends; TokenRing at cp 2 x pp 2 (zb-h1); the
#            hybrid at cp 4 = 2 x 2 in bf16 against one process in bf16
#   llama    llama-tiny (8 heads sharing 4 kv heads, RoPE): ring at cp 4; cp 2 x dp 2 ring at
#            ZeRO 1 with gradient accumulation and --recompute (the ring re-run in backward);
#            Ulysses at cp 2 x dp 2 ZeRO 3, at cp 2 x pp 2 (1F1B) and cp 2 x tp 2 with sequence
#            parallelism, the last two with the final evaluation; TokenRing at cp 2 x tp 2 (SP)
#            and at cp 2 x dp 2 ZeRO 3; the ring, TokenRing and Ulysses at cp 2 in bf16; fp32
#            losses within 1e-6
#   errors   the clear errors (also those cp x tp keeps: Ulysses heads per tp rank, rows under SP)
# So each kind runs at cp 2 and at cp 4, each family with each kind, and every composition once.
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3 MODE=$4
source "$SRC/tests/mpi/train_lib.sh"
for i in "${!args[@]}"; do [ "${args[$i]}" = --seq-len ] && args[$((i + 1))]=64; done
args+=(--steps 5 --eval-batches 2)
STEPS=5

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

step_cp_sends() {  # step_cp_sends <run>: "calls bytes" of the cp point-to-point sends, per step
  grep '"tokens_per_s"' "$1/metrics.jsonl" | grep -o '"cp":{"recv":{[^}]*},"send":{[^}]*}' \
    | sed -E 's/.*"send":\{[^}]*"bytes":([0-9]+),"calls":([0-9]+).*/\2 \1/'
}

reference() {  # reference <name> args...: the single-process run
  local name=$1
  shift
  "$WEFT" train "${args[@]}" "$@" --out "$name" >"$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}

case $MODE in
gpt2)
  args+=(--n-layer 4)
  reference ref
  train 4 ulysses4 --cp 4 --cp-kind ulysses
  same_as_ref ulysses4 ref $STEPS
  check grep -q '^cp ' ulysses4.log  # the cp axis in the communication table
  # tiny with 4 layers, C = 64; batch 8 of T = 64 in one micro-batch; fp32: 32 calls a step
  # of 8 x 64/4 x 64 floats each.
  want="$STEPS $((4 * 8)) $((4 * 8 * 8 * 64 / 4 * 64 * 4))"
  got=$(step_all_to_alls ulysses4 | uniq -c | sed 's/^ *//')
  echo "ulysses cp 4: steps, all-to-all calls and bytes of each: $got (expected $want)"
  check [ "$got" = "$want" ]
  # USP: each pair gathers its two zigzag chunks of a ring over 2 for 2 of the 4 heads.
  train 4 hybrid4 --cp 4 --cp-kind hybrid --cp-ulysses 2
  same_as_ref hybrid4 ref $STEPS
  # Every stage's ranks hold the same zigzag rows; the pipeline carries cp-local activations.
  # Under tp the cp group is one tp rank's: the ring runs over its heads.
  train 4 cp2_pp2 --cp 2 --pp 2 --pp-schedule interleaved --vpp 2 --micro-batch-size 2
  train 4 cp2_tp2_sp --cp 2 --tp 2 --sequence-parallel --micro-batch-size 1
  # TokenRing under zb-h1: TokenRing with a pipeline, and cp with a split backward, in one run
  # (the W defers only weights' products; attention, whichever ring, stays in the B).
  train 4 token2_pp2_zbh1 --cp 2 --pp 2 --ring-bidirectional --pp-schedule zb-h1 --micro-batch-size 2
  for run in cp2_pp2 cp2_tp2_sp token2_pp2_zbh1; do
    same_as_ref $run ref $STEPS
    same_val_loss $run ref
  done
  # TokenRing: per layer and step, cp-1 times each, queries (rows x C) and partial results
  # (rows x (C + heads)) forward, queries, dO, out and lse (rows x (3C + heads)) and dQ
  # (rows x C) backward: (cp-1) x rows x (6C + 2 heads) floats, 4 sends, with rows = 8 x 64/cp.
  # cp 4 only: there partials go back over several hops to their owner (at cp 2 the owner is
  # the neighbour); cp_train_llama runs cp 2 with GQA.
  # --trace without a pipeline: the last step's communication, every rank's track; its cp sends
  # are the ones the counters saw (4 ranks x 4 x 4 x (cp-1)).
  for cp in 4; do
    train $cp token$cp --cp $cp --ring-bidirectional --trace token$cp.json
    same_as_ref token$cp ref $STEPS
    want="$STEPS $((4 * 4 * (cp - 1))) $((4 * (cp - 1) * 8 * 64 / cp * (6 * 64 + 2 * 4) * 4))"
    got=$(step_cp_sends token$cp | uniq -c | sed 's/^ *//')
    echo "TokenRing cp $cp: steps, cp sends and bytes of each step: $got (expected $want)"
    check [ "$got" = "$want" ]
    sends=$(grep -o '"name": *"cp send [^"]*to rank' token$cp.json | wc -l)
    echo "TokenRing cp $cp: cp sends in the --trace timeline: $sends (expected $((cp * 4 * 4 * (cp - 1))))"
    check [ "$sends" -eq $((cp * 4 * 4 * (cp - 1))) ]
    check grep -q '"name": *"step (rank 3)"' token$cp.json
  done
  # bf16 (issue 16): q, k, v and the attention output are kept as bf16 under cp too, and the
  # ring runs the bf16 kernel on them with its K/V blocks in bf16; each pair's output is rounded
  # to bf16 before the fp32 merge, where one process rounds once: per-step loss and gradient
  # norm within 2e-3 of one process in bf16, as the other bf16 layouts (bf16_comm.sh);
  # measured 2.3e-6 and 1.5e-4 on AVX512-BF16.
  # The hybrid in bf16: Ulysses trades bf16 within pairs, the ring across them runs bf16 (the
  # ring alone in bf16 at cp 2 is cp_train_llama's, with GQA).
  reference ref16 --dtype bf16
  train 4 hybrid_bf16 --cp 4 --cp-kind hybrid --cp-ulysses 2 --dtype bf16
  check "$CHECK" losses ref16 hybrid_bf16 2e-3
  # Resume across cp: the checkpoint is the logical model.
  train 2 hop --cp 2 --exit-after 2
  train 1 hop --resume
  check "$CHECK" losses ref hop 1e-5
  check "$CHECK" weights "$(ckpt ref $STEPS)" "$(ckpt hop $STEPS)" 1e-4
  ;;
llama)
  args+=(--model llama-tiny)
  reference ref
  train 4 ring4 --cp 4
  check grep -q '^cp ' ring4.log
  # Recomputation re-runs the ring in backward: every cp rank must do so in step.
  train 4 cp2_dp2_zero1 --cp 2 --zero 1 --micro-batch-size 2 --recompute
  train 4 cp2_dp2_zero3 --cp 2 --zero 3 --cp-kind ulysses
  # TokenRing with GQA (queries travel, 4 kv heads stay home) under tp 2 with sequence
  # parallelism: each tp rank's queries are its 4 of the 8 heads, and the rows a cp rank holds
  # start mid-sequence after the sequence-parallel split.
  train 4 token2_tp2_sp --cp 2 --tp 2 --sequence-parallel --ring-bidirectional
  train 4 token2_dp2_zero3 --cp 2 --zero 3 --ring-bidirectional
  # Losses within 1e-6 (issue 31 saw the ring at cp 2 off by 3.3e-6, inside 1e-5): the ring
  # changes only the order of sums, as for GPT-2. Measured 1.4e-9 to 3.0e-9 (grad norms up to
  # 3.3e-8).
  for run in ring4 cp2_dp2_zero1 cp2_dp2_zero3 token2_tp2_sp token2_dp2_zero3; do
    same_as_ref $run ref $STEPS 1e-6
  done
  # bf16 with GQA and RoPE, as gpt2 above: the ring, TokenRing and Ulysses, each sending bf16.
  reference ref16 --dtype bf16
  train 2 ring2_bf16 --cp 2 --dtype bf16
  check "$CHECK" losses ref16 ring2_bf16 2e-3
  train 2 token2_bf16 --cp 2 --ring-bidirectional --dtype bf16
  check "$CHECK" losses ref16 token2_bf16 2e-3
  train 2 cp2_bf16 --cp 2 --cp-kind ulysses --dtype bf16
  check "$CHECK" losses ref16 cp2_bf16 2e-3
  train 4 cp2_pp2 --cp 2 --pp 2 --pp-schedule 1f1b --cp-kind ulysses --micro-batch-size 2
  train 4 cp2_tp2_sp --cp 2 --tp 2 --sequence-parallel --cp-kind ulysses
  for run in cp2_pp2 cp2_tp2_sp; do
    same_as_ref $run ref $STEPS 1e-6
    same_val_loss $run ref
  done
  ;;
errors)
  expect_error 2 "--seq-len 62 with --cp 2: context parallelism cuts every sequence into 2 x cp = 4" --cp 2 --seq-len 62
  expect_error 2 "--cp-kind must be ring, ulysses or hybrid, got 'spiral'" --cp 2 --cp-kind spiral
  expect_error 4 "--cp-ulysses must divide --cp 4, got 3" --cp 4 --cp-kind hybrid --cp-ulysses 3
  expect_error 4 "--cp-kind hybrid splits the attention heads over --cp-ulysses 4: this rank's 2 heads" \
    --cp 4 --cp-kind hybrid --cp-ulysses 4 --n-head 2
  expect_error 4 "this rank's 2 heads and 2 key/value heads (of 2 and 2 over --tp 1) must both be multiples of it" \
    --cp 4 --cp-kind ulysses --n-head 2
  expect_error 2 "--ring-bidirectional is a kind of ring (TokenRing): it needs --cp-kind ring, got --cp-kind ulysses" \
    --cp 2 --cp-kind ulysses --ring-bidirectional
  expect_error 3 "world size 3 is not divisible by tp*pp*cp" --cp 2
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
