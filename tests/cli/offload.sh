# --offload optimizer: AdamW's moments (Lion's one state) live in files and stream through a
# small pool, in many groups (--offload-group-mb 0.25 cuts a one-layer tiny model's 1.7M floats
# per moment into 26 groups of 64K); 20 steps give bitwise the losses, gradient norms and
# checkpoint of the in-memory run (one rank; dp 2 at ZeRO-1 and ZeRO-3), a run stopped and
# resumed with offload continues bitwise, the files are gone after the run, and bad offload
# directories are refused before anything is written. 8-bit AdamW (byte streams cut at its
# blocks) and MeZO (its fp32 master alone, with a working copy) the same against their in-memory
# runs.
# --offload optimizer+params (the working weights and gradients in files too) the same, against
# the in-memory run of the same layout, and its peak memory against the estimate.
source "$(dirname "$0")/lib.sh"
prepare_data
args=(--model tiny --n-layer 1 --n-embd 32 --n-head 2 --data data/tinyshakespeare_train.bin
      --steps 20 --batch-size 2 --seq-len 16 --lr 1e-3 --warmup 2 --peak-gflops 100 --eval-batches 1)
mkdir -p off
"$WEFT" train "${args[@]}" --out mem 2>/dev/null
"$WEFT" train "${args[@]}" --out disk --offload optimizer --offload-dir off \
  --offload-group-mb 0.25 2>log.txt || { cat log.txt; exit 1; }
a=$(metric mem/metrics.jsonl loss | tr '\n' ' ')
b=$(metric disk/metrics.jsonl loss | tr '\n' ' ')
echo "in memory: $a"
echo "offloaded: $b"
[ "$(metric disk/metrics.jsonl loss | wc -l)" -eq 20 ] && [ "$a" = "$b" ] &&
  ok "20 steps' losses bit-identical with offload" || bad "losses differ"
[ "$(metric mem/metrics.jsonl grad_norm | tr '\n' ' ')" = \
  "$(metric disk/metrics.jsonl grad_norm | tr '\n' ' ')" ] && ok "grad norms bit-identical" ||
  bad "grad norms differ"
cmp -s mem/checkpoints/step_000020/rank_00000.bin disk/checkpoints/step_000020/rank_00000.bin &&
  ok "checkpoint (weights and moments) bit-identical" || bad "checkpoints differ"
read_b=$(metric disk/metrics.jsonl offload_read_bytes | head -1)
state_b=$(metric disk/metrics.jsonl state_bytes | head -1)
[ -n "$read_b" ] && [ "$read_b" -gt 0 ] && [ "$read_b" -le "$state_b" ] &&
  ok "each step reads the state from disk ($read_b of $state_b bytes)" || bad "read $read_b of $state_b"
grep -q "disk wrote it at" log.txt && ok "run reports the disk's bandwidth" || bad "no bandwidth line"
# The estimate counts the pool (3 slots x 2 moments x 0.25 MiB), not the moments on disk.
grep -q "memory estimate per rank: .* optimizer 1.5 MiB" log.txt &&
  ok "memory estimate counts the pool" || bad "estimate: $(grep 'memory estimate' log.txt)"
[ -z "$(ls off)" ] && ok "offload files removed at the end" || bad "left in off: $(ls off)"

# Lion's one state streams the same way, through the optimizer's step_range (7 groups).
"$WEFT" train "${args[@]}" --optimizer lion --out lion_mem 2>/dev/null
"$WEFT" train "${args[@]}" --optimizer lion --out lion_disk --offload optimizer \
  --offload-dir off --offload-group-mb 1 2>lion_log.txt || { cat lion_log.txt; exit 1; }
[ "$(metric lion_mem/metrics.jsonl loss | wc -l)" -eq 20 ] &&
  [ "$(metric lion_mem/metrics.jsonl loss | tr '\n' ' ')" = \
    "$(metric lion_disk/metrics.jsonl loss | tr '\n' ' ')" ] &&
  ok "lion: 20 steps' losses bit-identical with offload" || bad "lion losses differ"
# 3 slots x 1 state x 1 MiB (AdamW's would be 6 MiB).
grep -q "memory estimate per rank: .* optimizer 3.0 MiB" lion_log.txt &&
  ok "lion: the estimate counts a one-state pool" ||
  bad "lion estimate: $(grep 'memory estimate' lion_log.txt)"

# Stopped after 8 steps and resumed: the moments come back from the checkpoint into the files.
"$WEFT" train "${args[@]}" --out split --offload optimizer --offload-dir off \
  --offload-group-mb 0.25 --exit-after 8 2>/dev/null
"$WEFT" train "${args[@]}" --out split --offload optimizer --offload-dir off \
  --offload-group-mb 0.25 --resume 2>/dev/null
[ "$(metric split/metrics.jsonl loss | tr '\n' ' ')" = "$a" ] &&
  ok "resumed offload run bit-identical to the in-memory run" || bad "resumed run differs"
# ZeRO-1 and ZeRO-3 over two ranks: each rank streams its own shard's moments (ZeRO-3: beside
# its shard of the weights and gradients).
if mpirun -n 1 true 2>/dev/null; then
  for z in 1 3; do
    mpirun -n 2 "$WEFT" train "${args[@]}" --dp 2 --zero $z --out dp_mem$z 2>/dev/null
    mpirun -n 2 "$WEFT" train "${args[@]}" --dp 2 --zero $z --out dp_disk$z --offload optimizer \
      --offload-dir off --offload-group-mb 0.25 2>/dev/null
    [ "$(metric dp_mem$z/metrics.jsonl loss | wc -l)" -eq 20 ] &&
      [ "$(metric dp_mem$z/metrics.jsonl loss | tr '\n' ' ')" = \
        "$(metric dp_disk$z/metrics.jsonl loss | tr '\n' ' ')" ] &&
      ok "dp 2 ZeRO-$z: losses bit-identical with offload" || bad "dp 2 ZeRO-$z losses differ"
  done
  # The bf16 working copy over two ranks: gradients summed over dp before they are rounded,
  # and at ZeRO-1 each rank's updated slices of the copy gathered by all.
  for z in 0 1; do
    mpirun -n 2 "$WEFT" train "${args[@]}" --dtype bf16 --grad-dtype bf16 --dp 2 --zero $z \
      --out bdp_mem$z 2>/dev/null
    mpirun -n 2 "$WEFT" train "${args[@]}" --dtype bf16 --dp 2 --zero $z --out bdp_disk$z \
      --offload optimizer --offload-dir off --offload-group-mb 0.25 2>/dev/null
    [ "$(metric bdp_mem$z/metrics.jsonl loss | wc -l)" -eq 20 ] &&
      [ "$(metric bdp_mem$z/metrics.jsonl loss | tr '\n' ' ')" = \
        "$(metric bdp_disk$z/metrics.jsonl loss | tr '\n' ' ')" ] &&
      [ "$(metric bdp_mem$z/metrics.jsonl grad_norm | tr '\n' ' ')" = \
        "$(metric bdp_disk$z/metrics.jsonl grad_norm | tr '\n' ' ')" ] &&
      ok "bf16 dp 2 ZeRO-$z: losses and grad norms bit-identical with the master on disk" ||
      bad "bf16 dp 2 ZeRO-$z differs"
  done
  # The copy in files over two ranks: each rank's own files, its updated slices gathered by all
  # and written back through the cursor.
  mpirun -n 2 "$WEFT" train "${args[@]}" --dtype bf16 --dp 2 --zero 1 --out pdp_disk1 \
    --offload optimizer+params --offload-dir off 2>/dev/null
  [ "$(metric bdp_mem1/metrics.jsonl loss | tr '\n' ' ')" = \
    "$(metric pdp_disk1/metrics.jsonl loss | tr '\n' ' ')" ] &&
    [ "$(metric bdp_mem1/metrics.jsonl grad_norm | tr '\n' ' ')" = \
      "$(metric pdp_disk1/metrics.jsonl grad_norm | tr '\n' ' ')" ] &&
    ok "bf16 dp 2 ZeRO-1: losses and grad norms bit-identical with the parameters on disk" ||
    bad "bf16 dp 2 ZeRO-1 optimizer+params differs"
fi

# --dtype bf16 --offload optimizer: the bf16 working copy in memory, the fp32 master weights
# with the moments on disk. Its numbers are the in-memory bf16 run's with --grad-dtype bf16 (the
# block matrices' gradients rounded once): the products round the master's weights to the bits
# the working copy holds, and the fp32 tensors (embeddings, norms, biases) stay fp32 in it. GPT-2
# (biases, untied wpe) and Llama (a gated MLP, RMSNorm) shapes.
for m in tiny llama-tiny; do
  b16=("${args[@]}" --dtype bf16)
  # llama-tiny's 4 key/value heads need 4 query heads.
  [ $m = tiny ] || b16+=(--model $m --n-head 4 --n-embd 64)
  "$WEFT" train "${b16[@]}" --grad-dtype bf16 --out b_mem_$m 2>/dev/null
  "$WEFT" train "${b16[@]}" --out b_disk_$m --offload optimizer --offload-dir off \
    --offload-group-mb 0.25 2>b_log_$m.txt || { cat b_log_$m.txt; exit 1; }
  ba=$(metric b_mem_$m/metrics.jsonl loss | tr '\n' ' ')
  [ "$(metric b_disk_$m/metrics.jsonl loss | wc -l)" -eq 20 ] &&
    [ "$ba" = "$(metric b_disk_$m/metrics.jsonl loss | tr '\n' ' ')" ] &&
    ok "$m bf16: 20 steps' losses bit-identical with the master on disk" ||
    bad "$m bf16 losses differ: $ba / $(metric b_disk_$m/metrics.jsonl loss | tr '\n' ' ')"
  [ "$(metric b_mem_$m/metrics.jsonl grad_norm | tr '\n' ' ')" = \
    "$(metric b_disk_$m/metrics.jsonl grad_norm | tr '\n' ' ')" ] &&
    ok "$m bf16: grad norms bit-identical" || bad "$m bf16 grad norms differ"
  cmp -s b_mem_$m/checkpoints/step_000020/rank_00000.bin \
    b_disk_$m/checkpoints/step_000020/rank_00000.bin &&
    ok "$m bf16: checkpoint (master weights from the files, moments) bit-identical" ||
    bad "$m bf16 checkpoints differ"
  grep -q "optimizer state and fp32 master weights on disk" b_log_$m.txt &&
    ok "$m bf16: the master is on disk" || bad "no master on disk: $(grep offload: b_log_$m.txt)"
  # The working copy holds the block matrices at 2 bytes: less than fp32's 4 for the weights.
  p_mem=$(grep '"event":"start"' b_mem_$m/metrics.jsonl | sed 's/.*"params":\([0-9]*\).*/\1/')
  p_disk=$(grep '"event":"start"' b_disk_$m/metrics.jsonl | sed 's/.*"params":\([0-9]*\).*/\1/')
  [ -n "$p_disk" ] && [ "$p_disk" -lt "$p_mem" ] &&
    ok "$m bf16: weights in memory $p_disk bytes (fp32: $p_mem)" || bad "weights $p_disk vs $p_mem"
done
# --grad-dtype bf16 changes the in-memory run's numbers (it is not a no-op the test would pass
# by): the plain bf16 run differs.
"$WEFT" train "${args[@]}" --dtype bf16 --out b_plain 2>/dev/null
[ "$(metric b_plain/metrics.jsonl loss | tr '\n' ' ')" != \
  "$(metric b_mem_tiny/metrics.jsonl loss | tr '\n' ' ')" ] &&
  ok "bf16 gradients change the run (the comparison above can fail)" || bad "--grad-dtype bf16 did nothing"
# Stopped after 8 steps and resumed: the master comes back from the checkpoint into the files and,
# rounded, into the working copy.
"$WEFT" train "${args[@]}" --dtype bf16 --out b_split --offload optimizer --offload-dir off \
  --offload-group-mb 0.25 --exit-after 8 2>/dev/null
"$WEFT" train "${args[@]}" --dtype bf16 --out b_split --offload optimizer --offload-dir off \
  --offload-group-mb 0.25 --resume 2>/dev/null
[ "$(metric b_split/metrics.jsonl loss | tr '\n' ' ')" = \
  "$(metric b_mem_tiny/metrics.jsonl loss | tr '\n' ' ')" ] &&
  ok "bf16: resumed offload run bit-identical" || bad "bf16 resumed run differs"
# --offload optimizer+params: the working weights and gradients in files too, each unit read
# before use and the next read ahead (forward: unit 0 reads 1 ahead, 1 reads the final norm's;
# backward: the final norm reads the block's), its gradients written behind. 20 steps give
# bitwise the in-memory run of the same layout: tiny (GPT-2's shape) in fp32 (every unit's
# record its fp32 weights, in place) against plain fp32, and tiny and llama-tiny (a gated MLP,
# RMSNorm, a tied head) in bf16 (block matrices widened from bf16 records) against --grad-dtype
# bf16, the runs above. (llama-tiny in fp32 adds no path that tiny in fp32 does not take.)
for run in tiny:fp32 tiny:bf16 llama-tiny:bf16; do
  m=${run%:*} dt=${run#*:}
  p1=("${args[@]}")
  [ $m = tiny ] || p1+=(--model $m --n-head 4 --n-embd 64)
  ref=mem
  [ $dt = fp32 ] || ref=b_mem_$m
  "$WEFT" train "${p1[@]}" --dtype $dt --out p_disk_${m}_$dt --offload optimizer+params \
    --offload-dir off 2>p_log_${m}_$dt.txt || { cat p_log_${m}_$dt.txt; exit 1; }
  pa=$(metric $ref/metrics.jsonl loss | tr '\n' ' ')
  [ "$(metric p_disk_${m}_$dt/metrics.jsonl loss | wc -l)" -eq 20 ] &&
    [ "$pa" = "$(metric p_disk_${m}_$dt/metrics.jsonl loss | tr '\n' ' ')" ] &&
    [ "$(metric $ref/metrics.jsonl grad_norm | tr '\n' ' ')" = \
      "$(metric p_disk_${m}_$dt/metrics.jsonl grad_norm | tr '\n' ' ')" ] &&
    ok "$m $dt: 20 steps' losses and grad norms bit-identical with the parameters on disk" ||
    bad "$m $dt optimizer+params differs: $pa / $(metric p_disk_${m}_$dt/metrics.jsonl loss | tr '\n' ' ')"
  cmp -s $ref/checkpoints/step_000020/rank_00000.bin \
    p_disk_${m}_$dt/checkpoints/step_000020/rank_00000.bin &&
    ok "$m $dt: checkpoint bit-identical with the parameters on disk" ||
    bad "$m $dt optimizer+params checkpoints differ"
done
# Each step reads the weights (forward, backward, update) and the gradients, and writes both.
pr=$(metric p_disk_tiny_bf16/metrics.jsonl offload_params_read_bytes | tail -1)
pw=$(metric p_disk_tiny_bf16/metrics.jsonl offload_params_written_bytes | tail -1)
[ -n "$pr" ] && [ "$pr" -gt 0 ] && [ -n "$pw" ] && [ "$pw" -gt 0 ] &&
  grep -q "of working weights and gradients" p_log_tiny_bf16.txt &&
  ok "each step moves the parameters through the disk (read $pr, written $pw bytes)" ||
  bad "no parameter transfers: $pr / $pw"
[ -z "$(ls off)" ] && ok "optimizer+params files removed at the end" || bad "left in off: $(ls off)"
# Stopped after 8 steps and resumed: the weights come back into the files.
for i in 1 2; do
  extra=(--exit-after 8); [ $i = 1 ] || extra=(--resume)
  "$WEFT" train "${args[@]}" --dtype bf16 --out p_split --offload optimizer+params \
    --offload-dir off "${extra[@]}" 2>/dev/null
done
[ "$(metric p_split/metrics.jsonl loss | tr '\n' ' ')" = \
  "$(metric b_mem_tiny/metrics.jsonl loss | tr '\n' ' ')" ] &&
  ok "bf16 optimizer+params: resumed run bit-identical" || bad "optimizer+params resumed run differs"
# Memory, on a model whose weights dominate (llama-tiny's shape, 16 blocks of width 256, 32M
# parameters, fp32): with them on disk memory holds an end unit's records (the untied head's
# weights and gradient) and two blocks', under the --offload optimizer run's peak, and the
# run's estimate (the planner's count) within 15% of its peak resident memory.
wide=("${args[@]}" --model llama-tiny --n-embd 256 --n-head 4 --n-layer 16 --steps 1
     --batch-size 1 --offload-dir off)
"$WEFT" train "${wide[@]}" --out rss_opt --offload optimizer 2>rss_opt.txt
"$WEFT" train "${wide[@]}" --out rss_par --offload optimizer+params 2>rss_par.txt
peak() { sed -nE 's/.*peak resident memory of rank 0 ([0-9.]+) MiB \(estimate ([0-9.]+) MiB\).*/\1 \2/p' "$1"; }
read -r opt_peak opt_est <<<"$(peak rss_opt.txt)"
read -r par_peak par_est <<<"$(peak rss_par.txt)"
echo "peak RSS / estimate, MiB: optimizer $opt_peak / $opt_est, optimizer+params $par_peak / $par_est"
awk -v p="$par_peak" -v e="$par_est" -v o="$opt_peak" \
  'BEGIN { exit !(p > 0 && p < o && p <= 1.15 * e && p >= 0.85 * e) }' &&
  ok "optimizer+params: peak $par_peak MiB (optimizer: $opt_peak) within 15% of its estimate $par_est" ||
  bad "optimizer+params peak $par_peak MiB, estimate $par_est, optimizer's peak $opt_peak"
"$WEFT" plan --model llama-3.2-1b --cluster local --global-batch 1 --seq-len 1024 --dp 1 --tp 1 \
  --pp 1 --zero 0 --dtype fp32 --offload optimizer+params >plan_par.txt 2>&1
grep -q "weights 1.43 + grads 1.43 + " plan_par.txt &&
  grep -q "optimizer 9.21 + master and working weights and gradients 13.81 GiB on disk" plan_par.txt &&
  ok "plan --offload optimizer+params: 1.43 GiB of weights in memory, 13.81 more on disk" ||
  bad "plan: $(grep -h 'weights\|offloaded' plan_par.txt | head -2)"
expect_error "--offload optimizer+params (the working weights and gradients on disk, a layer at a time) with --zero 2" \
  bad15 -- train "${args[@]}" --out bad15 --offload optimizer+params --offload-dir off --zero 2
expect_error "--offload-dir nowhere: no such directory" bad17 -- train "${args[@]}" --out bad17 \
  --offload optimizer+params --offload-dir nowhere

expect_error "--grad-dtype bf16 with --dtype fp32" bad12 -- train "${args[@]}" --out bad12 \
  --grad-dtype bf16
expect_error "--grad-dtype must be fp32 or bf16, got 'fp16'" bad13 -- train "${args[@]}" \
  --out bad13 --grad-dtype fp16
expect_error "with --zero 2: the bf16 working copy keeps the whole buffer" bad14 -- train \
  "${args[@]}" --out bad14 --dtype bf16 --offload optimizer --offload-dir off --zero 2

# 8-bit AdamW (its codes of m and v, a byte an element, and an absmax pair per block of 2048:
# three byte streams cut at blocks) and MeZO (no state: with a working copy its fp32 master is
# on disk, perturbed and updated by passes over it). Width 64, so that the block matrices (64 x
# 192 and up) are quantised. Each against the in-memory run of the same layout: 8-bit AdamW
# stopped at step 8 and resumed (a resume requantises, so the in-memory run resumed alike).
# weft train with these arguments stopped after step 8, then resumed.
run_split() { "$WEFT" train "$@" --exit-after 8 && "$WEFT" train "$@" --resume; }
# Whether run $2 logged $3 (20) losses, the first of run $1's, and they wrote the same checkpoint
# of that step.
same_runs() {
  local n=${3:-20}
  [ "$(metric $2/metrics.jsonl loss | wc -l)" -eq $n ] &&
    [ "$(metric $1/metrics.jsonl loss | head -$n | tr '\n' ' ')" = \
      "$(metric $2/metrics.jsonl loss | tr '\n' ' ')" ] &&
    cmp -s $1/checkpoints/step_$(printf %06d $n)/rank_00000.bin \
      $2/checkpoints/step_$(printf %06d $n)/rank_00000.bin
}
a8=("${args[@]}" --n-embd 64 --optimizer adamw8bit)
run_split "${a8[@]}" --out a8_mem 2>/dev/null
run_split "${a8[@]}" --out a8_disk --offload optimizer --offload-dir off --offload-group-mb 0.25 \
  2>a8_log.txt || { cat a8_log.txt; exit 1; }
same_runs a8_mem a8_disk &&
  ok "adamw8bit: 20 steps' losses and checkpoint bit-identical with offload, resumed at 8" ||
  bad "adamw8bit offload differs: $(metric a8_disk/metrics.jsonl loss | tr '\n' ' ')"
grep -q "memory estimate per rank: .* optimizer 1.5 MiB" a8_log.txt &&
  ok "adamw8bit: the pool holds 3 groups of two byte streams and their absmaxes" ||
  bad "adamw8bit estimate: $(grep 'memory estimate' a8_log.txt)"
# bf16 with the parameters on disk too (8 steps: the path above plus the copy's files).
"$WEFT" train "${a8[@]}" --steps 8 --dtype bf16 --grad-dtype bf16 --out a8b_mem 2>/dev/null
"$WEFT" train "${a8[@]}" --steps 8 --dtype bf16 --out a8b_disk --offload optimizer+params \
  --offload-dir off --offload-group-mb 0.25 2>/dev/null
same_runs a8b_mem a8b_disk 8 &&
  ok "adamw8bit bf16: 8 steps bit-identical with the master, state and parameters on disk" ||
  bad "adamw8bit bf16 optimizer+params differs"
# MeZO in bf16: the master in the files, the bf16 working copy in memory (stopped at step 8 and
# resumed) or in files too (the first 8 steps); against the uninterrupted in-memory bf16 run
# (which differs from fp32's). Its steps draw z four times per parameter and are slow: width 32,
# 10 steps.
# The checkpoints compared hold wte's padding rows, which a z drawn there would make differ
# (a resume reads them as zero) while the losses stay the same.
mz=("${args[@]}" --optimizer mezo --dtype bf16 --steps 10)
"$WEFT" train "${mz[@]}" --out mz_mem --save-every 8 2>/dev/null
run_split "${mz[@]}" --out mz_disk --offload optimizer --offload-dir off --offload-group-mb 0.25 \
  2>mz_log.txt || { cat mz_log.txt; exit 1; }
"$WEFT" train "${mz[@]}" --out mz_par --offload optimizer+params --offload-dir off \
  --offload-group-mb 0.25 --exit-after 8 2>/dev/null
same_runs mz_mem mz_disk 10 &&
  ok "mezo bf16: 10 steps' losses and checkpoint, the master on disk and resumed at 8, bit-identical with the uninterrupted in-memory run" ||
  bad "mezo bf16 offload resumed differs from the uninterrupted run: $(metric mz_disk/metrics.jsonl loss | tr '\n' ' ')"
same_runs mz_mem mz_par 8 &&
  ok "mezo bf16: bit-identical with the parameters on disk too (8 steps)" ||
  bad "mezo bf16 optimizer+params differs"
grep -q "GiB of fp32 master weights on disk" mz_log.txt && ok "mezo bf16: the master is on disk" ||
  bad "mezo: $(grep offload: mz_log.txt)"
# In fp32 MeZO's weights are its master and it has no state: nothing moves, and the run (stopped
# at step 1 and resumed) is the uninterrupted in-memory one, checkpoint too.
mz32=("${args[@]}" --optimizer mezo --steps 3)
"$WEFT" train "${mz32[@]}" --out mz32_mem 2>/dev/null
"$WEFT" train "${mz32[@]}" --out mz32_disk --offload optimizer --offload-dir off --exit-after 1 \
  2>mz32_log.txt
"$WEFT" train "${mz32[@]}" --out mz32_disk --offload optimizer --offload-dir off --resume \
  2>>mz32_log.txt
same_runs mz32_mem mz32_disk 3 &&
  [ "$(metric mz32_mem/metrics.jsonl loss | tr '\n' ' ')" != \
    "$(metric mz_mem/metrics.jsonl loss | head -3 | tr '\n' ' ')" ] &&
  grep -q "nothing to move to disk" mz32_log.txt &&
  ok "mezo fp32: --offload optimizer runs in memory, saying nothing is offloaded; resumed at 1, bit-identical" ||
  bad "mezo fp32 resumed differs from the uninterrupted run, or offload said: $(grep offload: mz32_log.txt)"
[ -z "$(ls off)" ] && ok "adamw8bit and mezo files removed at the end" || bad "left in off: $(ls off)"
if mpirun -n 1 true 2>/dev/null; then
  # dp 2 ZeRO-1 with the bf16 working copy: 8-bit AdamW's slices cut blocks (each rank's piece
  # a block of its own); MeZO moves the whole buffer on each rank (3 of its slow steps).
  for o in adamw8bit:64:8 mezo:32:3; do
    IFS=: read -r opt width steps <<<"$o"
    dp=("${args[@]}" --n-embd $width --steps $steps --optimizer $opt --dtype bf16 --dp 2 --zero 1)
    mpirun -n 2 "$WEFT" train "${dp[@]}" --grad-dtype bf16 --out odp_mem_$opt 2>/dev/null
    mpirun -n 2 "$WEFT" train "${dp[@]}" --out odp_disk_$opt --offload optimizer --offload-dir off \
      --offload-group-mb 0.25 2>/dev/null
    [ "$(metric odp_mem_$opt/metrics.jsonl loss | wc -l)" -eq $steps ] &&
      [ "$(metric odp_mem_$opt/metrics.jsonl loss | tr '\n' ' ')" = \
        "$(metric odp_disk_$opt/metrics.jsonl loss | tr '\n' ' ')" ] &&
      ok "$opt bf16 dp 2 ZeRO-1: $steps steps' losses bit-identical with offload" ||
      bad "$opt bf16 dp 2 ZeRO-1 differs"
  done
fi

# The planner prices the same: the moments on disk, the pool in memory.
plan=(plan --model llama-3.2-1b --cluster local --global-batch 1 --seq-len 1024 --dp 1 --tp 1
      --pp 1 --zero 0 --dtype fp32)
"$WEFT" "${plan[@]}" >plan_mem.txt 2>&1
"$WEFT" "${plan[@]}" --offload optimizer >plan_off.txt 2>&1
grep -q "optimizer 9.21 + " plan_mem.txt && grep -q "optimizer 0.09 + " plan_off.txt &&
  grep -q "optimizer 9.21 GiB on disk" plan_off.txt && ok "plan --offload moves 9.21 GiB to disk" ||
  bad "plan: $(grep -h 'optimizer' plan_mem.txt plan_off.txt)"
expect_error "--offload prices weft train's own offload" "" -- plan --model gpt2 --cluster local \
  --global-batch 8 --dtype bf16 --offload optimizer

# Bad input: one error each, before the run directory is written.
expect_error "requires --offload-dir" bad1 -- train "${args[@]}" --out bad1 --offload optimizer
expect_error "requires --offload" bad2 -- train "${args[@]}" --out bad2 --offload-dir off
expect_error "--offload-dir nowhere: no such directory" bad3 -- train "${args[@]}" --out bad3 \
  --offload optimizer --offload-dir nowhere
expect_error "--offload-dir nowhere: no such directory" bad3b -- train "${args[@]}" --out bad3b \
  --offload optimizer --offload-dir nowhere --optimizer mezo --dtype bf16
expect_error "not a directory" bad4 -- train "${args[@]}" --out bad4 --offload optimizer \
  --offload-dir log.txt
expect_error "--offload 'cpu': expected 'optimizer'" bad5 -- train "${args[@]}" --out bad5 \
  --offload cpu --offload-dir off
# The planner prices 8-bit AdamW's offload: its 2 bytes a parameter (and absmaxes) on disk.
"$WEFT" "${plan[@]}" --optimizer adamw8bit --offload optimizer >plan_a8.txt 2>&1
grep -q "optimizer 0.09 + " plan_a8.txt && grep -q "optimizer 3.77 GiB on disk" plan_a8.txt &&
  ok "plan --optimizer adamw8bit --offload moves its 3.77 GiB (adamw: 9.21) to disk" ||
  bad "plan adamw8bit: $(grep -h 'optimizer' plan_a8.txt)"
expect_error "--async-checkpoint with --offload optimizer" bad10 -- train "${args[@]}" \
  --out bad10 --offload optimizer --offload-dir off --async-checkpoint
# The memory check counts 8 bytes a parameter in memory with offload (16 without), and checks
# the disk: a 100B-parameter model is refused for either, before anything is allocated.
big=(train --model llama-3.2-3b --n-layer 1000 --data data/tinyshakespeare_train.bin --steps 1
     --batch-size 1 --seq-len 16)
expect_error "x 8 bytes of weights, gradients (adamw state on disk)" bad11 -- "${big[@]}" \
  --out bad11 --offload optimizer --offload-dir off
# With the parameters on disk memory holds a few layers: the disk is the floor (16 bytes a
# parameter under bf16), checked before the layout is built.
expect_error "of adamw state, master and working weights and gradients on this node's 1 rank(s)" \
  bad18 -- "${big[@]}" --out bad18 --dtype bf16 --offload optimizer+params --offload-dir off
echo "my notes" >off/weft-offload-rank0-exp_avg.bin
expect_error "is not a weft offload file" bad7 -- train "${args[@]}" --out bad7 \
  --offload optimizer --offload-dir off
[ "$(cat off/weft-offload-rank0-exp_avg.bin)" = "my notes" ] && ok "another's file left as it was" ||
  bad "another's file was overwritten"
rm off/weft-offload-rank0-exp_avg.bin
# A read-only file system (as root, permissions do not stop a write; a read-only mount does).
if [ -d /proc/sys ] && ! touch /proc/sys/weft-probe 2>/dev/null; then
  expect_error "--offload-dir" bad8 -- train "${args[@]}" --out bad8 --offload optimizer \
    --offload-dir /proc/sys
fi
# A disk too small for the state: a 1 MiB tmpfs, when this process may mount one.
mkdir small
if mount -t tmpfs -o size=1m weft-offload-test small 2>/dev/null; then
  trap 'umount small 2>/dev/null || true; rm -rf "$WORK"' EXIT
  expect_error "the disk has" bad9 -- train "${args[@]}" --out bad9 --offload optimizer \
    --offload-dir small
  expect_error "the disk has" bad9b -- train "${args[@]}" --out bad9b --offload optimizer \
    --offload-dir small --optimizer adamw8bit
  [ -z "$(ls small)" ] && ok "nothing written to the full disk" || bad "wrote $(ls small)"
  umount small
  trap 'rm -rf "$WORK"' EXIT
else
  echo "skip: cannot mount a tmpfs here (the disk-full case is not tested)"
fi
finish
