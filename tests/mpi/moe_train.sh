#!/usr/bin/env bash
# Mixture of experts (moe-tiny: 2 layers of 4 SwiGLU experts, top 2, load-balance and z-losses
# on) under data parallelism against its single-process run: np 2, ZeRO 1, 5 steps. The routing
# counts of the load-balance loss are summed over the dp ranks before the loss, so every step's
# loss must agree within 1e-5 (relative), the final weights within 1e-4, and the logged routing
# (tokens per expert, integers) exactly, the router losses within 1e-5. Then expert parallelism
# (--ep, with ZeRO 1-3, pipeline stages, tensor and context parallelism) against the same
# reference, and the --moe-* and --ep errors. moe_train.sh <weft> <dp_check> <source dir>
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3
MODEL=moe-tiny
source "$SRC/tests/mpi/train_lib.sh"
# The issue asks parity over 5 steps: each run is a few seconds of start-up and 5 tiny steps.
S=5

"$WEFT" train "${args[@]}" --steps $S --out ref >ref.log 2>&1 || { cat ref.log; exit 1; }
train 2 dp2 --steps $S --zero 1
same_as_ref dp2 ref $S

# The logged routing: the same integers, the same router losses.
for key in moe_tokens_min moe_tokens_max; do
  check diff <(grep -o "\"$key\":\[[0-9,]*\]" ref/metrics.jsonl) \
    <(grep -o "\"$key\":\[[0-9,]*\]" dp2/metrics.jsonl)
done
aux() { grep -o '"moe_aux_loss":[-0-9.e]*' "$1/metrics.jsonl" | cut -d: -f2; }
check test "$(aux ref | wc -l)" -eq $S
check awk 'NR == FNR { r[FNR] = $1; next }
           { d = $1 - r[FNR]; if (d < 0) d = -d; if (r[FNR] <= 0 || d > 1e-5 * r[FNR]) bad = 1 }
           END { exit bad }' <(aux ref) <(aux dp2)

# Expert parallelism folded over dp, against the same reference: ep 2 x edp 2 with ZeRO 1 and
# ep 4 with ZeRO 2 (expert slices over edp, the rest over dp), ep 2 in each of 2 pipeline stages
# under zb-h1 (ZeRO 0: its B exchanges the rows as 1F1B's backward does, its W reads the rows
# received; 1F1B's backward with ep is every run above, pp 2 under 1F1B pp2_1f1b below), and ep 2 x edp 2 with ZeRO 3 for 3 steps
# resumed in one process (ep 1, ZeRO 0) for the last two: the expert moments go by logical index. Each MoE layer's forward exchanges the
# counts once and the rows twice (dispatch, combine), its backward the rows twice: 5 all-to-alls
# on "ep" per layer and step, 2 layers (1 per stage with --pp 2).
ep_steps() { grep -o "\"ep\":{\"all_to_all\":{[^}]*\"calls\":$2," "$1/metrics.jsonl" | wc -l; }
for run in "4 ep2z1 10 --ep 2 --zero 1" "4 ep4z2 10 --ep 4 --zero 2" \
  "4 ep2pp2zb 5 --ep 2 --pp 2 --pp-schedule zb-h1"; do
  read -r np out calls flags <<<"$run"
  # shellcheck disable=SC2086
  train "$np" "$out" --steps $S $flags
  same_as_ref "$out" ref $S
  check test "$(ep_steps "$out" "$calls")" -eq $S
done
# The zero-bubble schedules defer the experts', the router's and the shared experts' weight
# gradients to the W (MoeMlp::backward under DeferWeightGrads): at 4 layers and pp 2, zb-h1 bit
# for bit 1F1B, zb-v (a V: the gradient norm summed over other stages) within the tolerances;
# and zb-h1's first stage allocates the activations its estimate counts, the copies the W's wait
# on included (MoeMlp::deferred_floats).
train 2 pp2_1f1b --steps $S --n-layer 4 --pp 2 --micro-batch-size 2
for sched in zb-h1 zb-v; do
  train 2 pp2_$sched --steps $S --n-layer 4 --pp 2 --pp-schedule $sched --micro-batch-size 2
done
a=$(grep '"step":5,' pp2_zb-h1/metrics.jsonl | grep -o '"activation_bytes":[0-9]*' | cut -d: -f2)
check grep -q "activations $(awk -v a="$a" 'BEGIN { printf "%.1f", a / 1048576 }') MiB" pp2_zb-h1.log
check "$CHECK" losses pp2_1f1b pp2_zb-h1 0
check "$CHECK" weights "$(ckpt pp2_1f1b $S)" "$(ckpt pp2_zb-h1 $S)" 0
same_as_ref pp2_zb-v pp2_1f1b $S

train 4 ep2z3to1 --steps $S --ep 2 --zero 3 --exit-after 3
"$WEFT" train "${args[@]}" --steps $S --out ep2z3to1 --resume >ep2z3to1_resume.log 2>&1 \
  || { cat ep2z3to1_resume.log; failures=$((failures + 1)); }
same_as_ref ep2z3to1 ref $S
check test "$(ep_steps ep2z3to1 10)" -eq 3

# Gradients reduced in bf16 with ep (np 4, ep 2 x edp 2): at ZeRO 1 each run of a bucket crosses
# its own group (dp or edp) as bf16 blocks, is summed in fp32 and all-gathered in bf16; at ZeRO 2
# each group's part is all-to-all'd in bf16 and summed into the shard. As bf16_comm.sh's dp
# mode: per-step loss within 2e-3 of the fp32 run (each gradient is rounded before the sum).
for zero in 1 2; do
  train 4 ep2z${zero}bf16 --steps $S --ep 2 --zero $zero --grad-reduce-dtype bf16
  check "$CHECK" losses ref ep2z${zero}bf16 2e-3
done

# Under tensor parallelism the MoE block runs replicated on every tp rank (the same rows, the
# same routing, its ep slice of the experts whole), attention split over tp: tp 2 x dp 2 with
# ep 2 at ZeRO 1 (np 4, each tp rank's ep group its own dp ranks) for 3 steps, resumed in one
# process (tp 1, ep 1) for the last two: expert tensors are saved by tp rank 0. (A tp 2 run at
# ep 1 ran the same MoE code under tp, without the exchange.)
train 4 tp2ep2 --steps $S --tp 2 --ep 2 --zero 1 --exit-after 3
"$WEFT" train "${args[@]}" --steps $S --out tp2ep2 --resume >tp2ep2_resume.log 2>&1 \
  || { cat tp2ep2_resume.log; failures=$((failures + 1)); }
same_as_ref tp2ep2 ref $S
check test "$(ep_steps tp2ep2 10)" -eq 3

# With context parallelism ep folds over cp x dp (the ranks that split the tokens): ep 2 over the
# two cp ranks of a ring (np 2), and ep 4 over cp 2 x dp 2 with Ulysses and ZeRO 3 (np 4, expert
# slices over edp of size 1, the rest over cp x dp).
train 2 cp2ep2 --steps $S --cp 2 --ep 2 --zero 1
same_as_ref cp2ep2 ref $S
check test "$(ep_steps cp2ep2 10)" -eq $S
train 4 cp2dp2ep4 --steps $S --cp 2 --cp-kind ulysses --ep 4 --zero 3
same_as_ref cp2dp2ep4 ref $S
check test "$(ep_steps cp2dp2ep4 10)" -eq $S

refuse() {  # refuse <message> args...: exit 1 with the message, nothing written
  local msg=$1
  shift
  out=$("$WEFT" train "${args[@]}" --steps 1 --out runs/x "$@" 2>&1)
  check [ $? -eq 1 ]
  check grep -qF -- "$msg" <<<"$out"
  check [ ! -e runs/x ]
}
refuse "--moe-aux-loss-coef must be 0 (off) or a positive number, got -0.5" --moe-aux-loss-coef -0.5
refuse "--moe-capacity-factor must be 0 (off: dropless) or a positive number, got -1" \
  --moe-capacity-factor -1
refuse "--moe-z-loss-coef 0.1: model 'tiny' has no mixture-of-experts layers" --model tiny \
  --moe-z-loss-coef 0.1
# --ep folds over dp: it must divide dp, the experts must divide by it, and a dense model has none.
expect_error 2 "--ep 4 does not divide the data-parallel size dp=2" --ep 4
expect_error 3 "--ep 3: model 'moe-tiny' has 4 experts per layer, not divisible by ep" --ep 3 \
  --batch-size 6
expect_error 2 "--ep 2: model 'tiny' is dense (no mixture-of-experts layers), expected --ep 1" \
  --model tiny --ep 2
expect_error 2 "--ep 4 does not divide cp x dp = 2 x 1 = 2" --ep 4 --cp 2
expect_error 2 "--tp 2 with --sequence-parallel: weft's mixture-of-experts layers (4 experts) run replicated on every tp rank" \
  --tp 2 --sequence-parallel
finish
