# weft plan on GPU clusters: the new flags' bad values are one clear error each, a recipe that ran
# on 80 GB H100s (NeMo's Llama 3 70B, FlashAttention, no recomputation) is predicted to fit, the
# score-keeping attention is not, and the text says why the first layout beat the second.
source "$(dirname "$0")/lib.sh"
c=(--cluster "$SRC/configs/clusters/dgx-h100.json")

expect_error "--attention must be flash or scores, got 'dense'" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --attention dense
expect_error "--pp-layers 3,3 needs --pp" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --pp-layers 3,3
expect_error "--balance prices balanced packed documents; it needs --doc-lengths" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --balance
expect_error "--doc-lengths 'lognormal:3': expected lognormal:MEDIAN:SIGMA or pareto:MIN:ALPHA" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --doc-lengths lognormal:3
expect_error "3,3" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --pp 2 --pp-layers 3,3
expect_error "--dtype must be bf16, fp16 or fp8 for a GPU run, got 'int4'" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --dtype int4
expect_error "--attention scores needs --memory-profile korthikanti" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --dtype fp32 --attention scores
expect_error "--pp-keep-outputs needs --memory-profile korthikanti" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --dtype fp32 --pp-keep-outputs
expect_error "--swiglu must be kept or fused, got 'both'" "" -- plan --model llama-3-8b "${c[@]}" --global-batch 8 --swiglu both
expect_error "--swiglu fused is for a gated MLP; gpt2 (family gpt2) has none" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --swiglu fused
expect_error "--swiglu fused describes a bf16/fp16 kernel; under --dtype fp8" "" -- plan --model llama-3-8b "${c[@]}" --global-batch 8 --dtype fp8 --swiglu fused
expect_error "--swiglu fused needs --memory-profile korthikanti" "" -- plan --model llama-3-8b "${c[@]}" --global-batch 8 --dtype fp32 --swiglu fused
# A cluster file without the node's disk cannot price --offload's transfers.
expect_error "--offload optimizer prices the disk's time, but $SRC/configs/clusters/dgx-h100.json has no \"disk\"" "" -- plan --model gpt2 "${c[@]}" --global-batch 8 --dtype fp32 --offload optimizer

# NeMo 24.07's Llama 3 70B recipe on 64 H100s (docs/planner.md, data/published_runs.json).
recipe=(plan --model llama-3-70b "${c[@]}" --global-batch 128 --seq-len 8192 --dtype fp8 --dp 2 --tp 4
        --pp 4 --cp 2 --vpp 5 --pp-schedule interleaved --sp --micro-batch 1 --zero 1 --recompute none
        --tp-overlap --json)
if "$WEFT" "${recipe[@]}" >fits.json 2>&1 && python3 -c "
import json; j = json.load(open('fits.json')); assert j['best'][0]['fits'], j" 2>/dev/null; then
  ok "NeMo Llama 3 70B recipe fits: $(python3 -c "import json; print(round(json.load(open('fits.json'))['best'][0]['memory_bytes']['total'] / 2**30, 1))") GiB"
else
  bad "NeMo Llama 3 70B recipe: $(cat fits.json)"
fi
"$WEFT" "${recipe[@]}" --attention scores >scores.json 2>&1 || true
if python3 -c "import json; j = json.load(open('scores.json')); assert 'best_unfitting' in j" 2>/dev/null; then
  ok "with s x s scores kept the same recipe does not fit"
else
  bad "scores variant: $(head -c 400 scores.json)"
fi

# Outputs kept after their send (torch.distributed.pipelining) cost the same recipe memory; freed
# (Megatron-LM, Llama 3) is the default.
"$WEFT" "${recipe[@]}" --pp-keep-outputs >kept.json 2>&1 || true
if python3 -c "
import json; f = json.load(open('fits.json'))['best'][0]; k = json.load(open('kept.json'))['best'][0]
assert k['memory_bytes']['activations'] > f['memory_bytes']['activations'], (f, k)" 2>/dev/null; then
  ok "--pp-keep-outputs adds the kept outputs' bytes"
else
  bad "--pp-keep-outputs: $(head -c 400 kept.json)"
fi

# Meta's fused SwiGLU (xformers) keeps gate and up, not their product: the same recipe in bf16
# holds less with --swiglu fused, and says so in its header.
bf=(plan --model llama-3-70b "${c[@]}" --global-batch 128 --seq-len 8192 --dp 2 --tp 4 --pp 4 --cp 2
    --vpp 5 --pp-schedule interleaved --sp --micro-batch 1 --zero 1 --recompute none)
"$WEFT" "${bf[@]}" --json >glu_kept.json 2>&1 || true
"$WEFT" "${bf[@]}" --json --swiglu fused >glu_fused.json 2>&1 || true
if python3 -c "
import json; k = json.load(open('glu_kept.json')); f = json.load(open('glu_fused.json'))
assert f['swiglu'] == 'fused' and k['swiglu'] == 'kept', (k['swiglu'], f['swiglu'])
a = lambda j: j['best'][0]['memory_bytes']['activations']
assert a(f) < a(k), (a(k), a(f))" 2>/dev/null; then
  ok "--swiglu fused keeps fewer activation bytes"
else
  bad "--swiglu fused: $(head -c 400 glu_fused.json)"
fi

# This machine's cluster file has its disk: --offload's line gives the disk's time, the pass
# behind the forward on one rank with the bf16 copy, in the step under fp32.
for dt in bf16:behind fp32:"in the step"; do
  out=$("$WEFT" plan --model tiny --cluster "$SRC/configs/clusters/local.json" --global-batch 1 \
        --seq-len 64 --dtype ${dt%%:*} --memory-profile engine --offload optimizer 2>&1) || true
  grep -q "offload: disk .* optimizer pass .* ${dt#*:}" <<<"$out" &&
    ok "${dt%%:*}: $(grep -m1 'offload:' <<<"$out")" || bad "${dt%%:*} offload: $out"
done
expect_error "--disk-read-gbs 3 and --disk-write-gbs 0: expected both positive" prof.json -- profile --out prof.json --disk-read-gbs 3

# Uneven stages are accepted and shown; the search explains its choice.
out=$("$WEFT" plan --model llama-3-8b "${c[@]}" --nodes 2 --global-batch 64 --seq-len 8192 --tp 8 --pp 2 \
      --pp-layers 15,17 --top 2 2>&1) || true
grep -q "layers=15,17" <<<"$out" && ok "uneven stages: $(grep -m1 'layers=' <<<"$out")" || bad "uneven stages: $out"
grep -q "^why 1 over 2" <<<"$out" && ok "$(grep '^why' <<<"$out")" || bad "no why line: $out"
finish
