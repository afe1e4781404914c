# weft profile writes a cluster file weft plan reads, with this host's bf16 peak beside the fp32
# one: a bf16 peak taken from another CPU priced a bf16 3B step 2.3x too fast (docs/memory.md).
source "$(dirname "$0")/lib.sh"

"$WEFT" profile --out prof.json --seconds 0.005 --widths 64 >profile.out 2>&1 || bad "profile: $(cat profile.out)"
peaks=$(python3 -c "import json; p = json.load(open('prof.json'))['device']['peak_tflops']; \
print(p['fp32'], p['bf16'])" 2>&1) || bad "prof.json: $peaks"
read -r fp32 bf16 <<<"$peaks"
python3 -c "import sys; sys.exit(0 if 0 < $bf16 < 1e3 and 0 < $fp32 < 1e3 else 1)" &&
  ok "peaks: fp32 $fp32, bf16 $bf16 TFLOP/s" || bad "peaks: $peaks"
grep -q "bf16 [0-9.]*, GEMM efficiency" profile.out && ok "$(cat profile.out | tail -1)" ||
  bad "no bf16 peak printed: $(cat profile.out)"
# weft plan prices bf16 at that peak: the file loads and a bf16 layout is priced.
out=$("$WEFT" plan --model tiny --cluster prof.json --global-batch 1 --seq-len 64 --dtype bf16 \
      --memory-profile engine 2>&1) || true
grep -q "FLOP/s bf16" <<<"$out" && ok "$(grep -m1 'cluster' <<<"$out")" || bad "plan: $out"
expect_error "--widths 4: expected widths from 8 to 16384" bad.json -- profile --out bad.json --widths 4
finish
