#!/bin/bash
# GPT-2 (124M) beside a Llama shape (SmolLM-135M: 30 layers, width 576, 9 heads sharing 3
# key/value heads, SwiGLU 1536, vocabulary 49152, tied) at B = 4, T = 1024: one process with two
# threads and two data-parallel ranks with one thread each, fp32 and bf16 matrix products
# (docs/performance.md, "Model families"):
#
#   bench/models.sh [PRESET ...]      (default: gpt2 smollm-135m)
#
# MFU is the achieved model FLOP/s over the two-core GEMM peak of the run's precision, for one
# process with two threads and for two ranks with one thread each alike.
#
# Measures the fp32 and bf16 GEMM peaks first (best of n = 1024, 2048, 4096), waits for an idle
# machine before every run, and prints a markdown table: tokens/s, achieved model GFLOP/s, MFU
# against the measured peak of the run's precision, peak RSS. Environment: WEFT (default
# build/weft), OUT (default build/models).
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT=${WEFT:-build/weft}
OUT=${OUT:-build/models}
PRESETS=("$@")
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(gpt2 smollm-135m)
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
load() { cut -d' ' -f1 /proc/loadavg; }
wait_idle() {  # at most 10 minutes, until the CPUs were 90% idle over 5 s
  for _ in $(seq 120); do
    read -r _ u1 n1 s1 i1 w1 _ </proc/stat
    sleep 5
    read -r _ u2 n2 s2 i2 w2 _ </proc/stat
    busy=$(((u2 + n2 + s2) - (u1 + n1 + s1)))
    idle=$(((i2 + w2) - (i1 + w1)))
    [ $((100 * idle / (busy + idle + 1))) -ge 90 ] && return 0
  done
  echo "warning: the machine did not become idle; measuring anyway" >&2
}

: >"$OUT/peaks.jsonl"
for n in 1024 2048 4096; do
  wait_idle
  OMP_NUM_THREADS=2 "$WEFT" bench peak --size $n --seconds 3 --json | tee -a "$OUT/peaks.jsonl"
done
read -r FP32 BF16 < <(python3 -c '
import json, sys
p = [json.loads(l) for l in open(sys.argv[1])]
print(max(x["fp32_gflops"] for x in p), max(x["bf16_gflops"] for x in p))' "$OUT/peaks.jsonl")
echo "best peaks: fp32 $FP32, bf16 $BF16 GFLOP/s"

: >"$OUT/runs.jsonl"
for preset in "${PRESETS[@]}"; do
  for dtype in fp32 bf16; do
    peak=$FP32
    [ $dtype = bf16 ] && peak=$BF16
    common=(--preset "$preset" --batch-size 4 --seq-len 1024 --steps 3 --dtype $dtype
      --peak-gflops "$peak" --json)
    for ranks in 1 2; do
      wait_idle
      l=$(load)
      if [ $ranks = 1 ]; then
        json=$(OMP_NUM_THREADS=2 "$WEFT" bench train "${common[@]}")
      else
        json=$(mpirun -np 2 --bind-to none "$WEFT" bench train "${common[@]}" | tail -1)
      fi
      python3 -c '
import json, sys
j = json.loads(sys.argv[1]); j["load_before"] = float(sys.argv[2]); j["ranks_run"] = int(sys.argv[3])
print(json.dumps(j))' "$json" "$l" "$ranks" | tee -a "$OUT/runs.jsonl" | cut -c1-160
    done
  done
done

python3 - "$OUT/runs.jsonl" "$FP32" "$BF16" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
# MFU against the two-core peak of the run's precision: the job's two cores either way.
peak = {"fp32": float(sys.argv[2]), "bf16": float(sys.argv[3])}
print("| model | params | dtype | ranks x threads | load before | tokens/s | model GFLOP/s | MFU | peak RSS MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in runs:
    n = r["ranks_run"]
    print(f"| {r['preset']} | {r['parameters'] / 1e6:.1f}M | {r['dtype']} | {n} x {2 // n} | "
          f"{r['load_before']:.2f} | {r['tokens_per_s']:.0f} | {r['achieved_gflops']:.0f} | "
          f"{100 * r['achieved_gflops'] / peak[r['dtype']]:.1f}% | {r['peak_rss_bytes'] / 2**20:.0f} |")
PY
