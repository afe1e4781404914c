#!/bin/bash
# The mixed-precision and scaling tables of docs/performance.md (issue 6):
#
#   bench/scaling.sh [--quick]
#
# 1. measures the fp32 and bf16 GEMM peaks (`weft bench peak`: the best of n = 512, 1024 and
#    2048), so that MFU is taken against the best this machine does (bf16 peaks at small n here:
#    940-990 GFLOP/s at 512 and 1024 against 780-930 at 2048);
# 2. runs `weft bench train --json --profile` for every (model, batch, T) below in fp32 and
#    bf16, one process with two threads, and records the 1-minute load average before each run
#    (the two cores are the whole machine: anything else running shows in the figures);
# 3. measures the peaks again: the host's speed drifts by up to 10% over minutes (the bf16 peak
#    read 910-1020 GFLOP/s within an hour), so every MFU in the tables is taken against the
#    higher of the two measurements, the stricter figure;
# 4. prints the tables as markdown.
# --quick runs only gpt2 and gpt2-medium at B = 4, T = 1024 (issue 16's table). Environment: WEFT (default build/weft), OUT (default
# build/scaling, which git ignores).
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT=${WEFT:-build/weft}
OUT=${OUT:-build/scaling}
QUICK=0
for a in "$@"; do
  case $a in
    --quick) QUICK=1 ;;
    *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
export OMP_NUM_THREADS=2
load() { cut -d' ' -f1 /proc/loadavg; }
# Waits (at most 10 minutes) until the CPUs were at least 90% idle over 5 s: on a shared machine
# a run that overlaps someone's build measures the build.
wait_idle() {
  for _ in $(seq 120); do
    read -r _ u1 n1 s1 i1 w1 _ < /proc/stat
    sleep 5
    read -r _ u2 n2 s2 i2 w2 _ < /proc/stat
    busy=$(((u2 + n2 + s2) - (u1 + n1 + s1)))
    idle=$(((i2 + w2) - (i1 + w1)))
    [ $((100 * idle / (busy + idle + 1))) -ge 90 ] && return 0
  done
  echo "warning: the machine did not become idle; measuring anyway" >&2
}

echo "== GEMM peaks, 2 threads (load $(load))"
wait_idle
"$WEFT" bench peak --seconds 3 --json | tee "$OUT/peaks.jsonl"
read -r FP32 BF16 < <(python3 -c '
import json, sys
p = [json.loads(l) for l in open(sys.argv[1])]
print(max(x["fp32_gflops"] for x in p), max(x["bf16_gflops"] for x in p))' "$OUT/peaks.jsonl")
echo "best: fp32 $FP32, bf16 $BF16 GFLOP/s"

# preset batch T steps
RUNS=("gpt2 4 1024 3" "gpt2-medium 4 1024 2")
if [ $QUICK = 0 ]; then
  RUNS+=("gpt2-large 1 1024 2" "gpt2 16 256 3" "gpt2 1 4096 3"
    "gpt2 1 256 3" "gpt2 1 1024 3")
fi
: >"$OUT/runs.jsonl"
for run in "${RUNS[@]}"; do
  read -r preset batch T steps <<<"$run"
  for dtype in fp32 bf16; do
    peak=$FP32
    [ $dtype = bf16 ] && peak=$BF16
    wait_idle
    l=$(load)
    echo "== $preset B=$batch T=$T $dtype (load $l)"
    json=$("$WEFT" bench train --preset "$preset" --batch-size "$batch" --seq-len "$T" \
      --steps "$steps" --dtype $dtype --peak-gflops "$peak" --profile --json)
    # The 1-minute load after the run: about 2 (this run's threads) when nothing else ran.
    python3 -c '
import json, sys
j = json.loads(sys.argv[1])
j["load_before"], j["load_after"] = float(sys.argv[2]), float(sys.argv[3])
print(json.dumps(j))' "$json" "$l" "$(load)" | tee -a "$OUT/runs.jsonl" | cut -c1-200
  done
done

echo "== GEMM peaks again, 2 threads (load $(load))"
wait_idle
"$WEFT" bench peak --seconds 3 --json | tee -a "$OUT/peaks.jsonl"

python3 - "$OUT/runs.jsonl" "$OUT/peaks.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
peaks = [json.loads(l) for l in open(sys.argv[2])]
best = {dt: max(p[dt + "_gflops"] for p in peaks) for dt in ("fp32", "bf16")}
print("Peaks (GFLOP/s), before and after the runs: " + "; ".join(
    f"fp32 {p['fp32_gflops']:.1f}, bf16 {p['bf16_gflops']:.1f}" for p in peaks) +
    f". MFU below is against the higher: fp32 {best['fp32']:.1f}, bf16 {best['bf16']:.1f}.")
print()
for r in runs:
    r["mfu"] = r["achieved_gflops"] / best[r["dtype"]]
def attention_ms(r):
    return sum(k["ms"] for k in r["profile"]["kernels"] if k["name"].startswith("attention"))
def key(r):
    return (r["preset"], r["batch_size"], r["seq_len"])
by = {}
for r in runs:
    by.setdefault(key(r), {})[r["dtype"]] = r
print("| model | B x T | dtype | load before/after | step s | tokens/s | MFU | bf16/fp32 | peak RSS MiB | "
      "attention ms (share) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k, d in by.items():
    for dt in ("fp32", "bf16"):
        if dt not in d:
            continue
        r = d[dt]
        ratio = ""
        if dt == "bf16" and "fp32" in d:
            ratio = f"{r['tokens_per_s'] / d['fp32']['tokens_per_s']:.2f}x"
        a = attention_ms(r)
        print(f"| {k[0]} | {k[1]} x {k[2]} | {dt} | {r['load_before']:.2f}/{r['load_after']:.2f} | {r['step_s']:.2f} | "
              f"{r['tokens_per_s']:.0f} | {100 * r['mfu']:.1f}% | {ratio} | "
              f"{r['peak_rss_bytes'] / 2**20:.0f} | {a:.0f} ({100 * a / r['profile']['step_ms']:.1f}%) |")
print()
print("Profiles (ms per step, share):")
for r in runs:
    p = r["profile"]
    parts = ", ".join(f"{k['name']} {k['ms']:.0f} ({100 * k['share']:.1f}%)" for k in p["kernels"])
    nested = ", ".join(f"{k['name']} {k['ms']:.0f}" for k in p["nested"])
    print(f"- {r['preset']} {r['batch_size']}x{r['seq_len']} {r['dtype']}: step {p['step_ms']:.0f}: "
          f"{parts}, other {p['other_ms']:.0f}; inside: {nested}")
PY
