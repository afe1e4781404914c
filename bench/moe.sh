#!/usr/bin/env bash
# Mixture of experts on this machine (docs/performance.md, "Mixture of experts"): a tiny Mixtral
# (4 layers, width 256, 8 heads over 4 kv heads, 8 experts of width 512, top 2, aux loss 0.02,
# tied vocabulary 50257) at ep 1 (np 2, dp 2) and ep 2 (np 2, dp 2 folded), against a dense
# Llama of the same active parameters (the same shape with one MLP of width 2 x 512), trained on
# tinyshakespeare from the same seed, batch 8 x 128 tokens, one thread per rank.
#   bench/moe.sh [build dir] [steps]
# Prints per run, over the steps after the first: tokens/s and their share of the two-core fp32
# GEMM peak that `weft bench peak` measures first (the trainer's MFU with --peak-gflops, a rank's
# peak, set to half of it), the share of the step rank 0 spent in the ep all-to-alls and in the dp all-reduce
# (metrics.jsonl comm stats), and the load imbalance: per MoE layer max/min tokens per expert of
# the step's batch (an idle expert counted as 1), at the first and last step and its mean over
# the run (mean over layers), and max/mean (the busiest expert over the balanced share: what
# `weft plan --moe-imbalance` prices) over the run. Also writes the table to $OUT (default build/moe_bench.md).
set -euo pipefail
# The model directories and the tables are written by python3 (bench/moe_model.py), which a
# fresh Debian lacks: a benchmark, unlike the engine and its tests, may ask for it.
command -v python3 >/dev/null || {
  echo "bench/moe.sh needs python3 (apt-get install python3); nothing was run" >&2
  exit 2
}
BUILD=${1:-build} STEPS=${2:-20}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
python3 "$SRC/bench/moe_model.py" moe --experts 8 --top-k 2 --ffn 512
python3 "$SRC/bench/moe_model.py" dense --experts 0 --ffn 1024
echo "load before: $(bench_load)"
PEAK=$(OMP_NUM_THREADS=2 "$WEFT" bench peak --size 2048 --seconds 3 --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["fp32_gflops"])')
echo "fp32 GEMM peak, 2 threads: $PEAK GFLOP/s"
args=(--data data/tinyshakespeare_train.bin --batch-size 8 --seq-len 128 --steps "$STEPS"
      --threads 1 --peak-gflops "$(python3 -c "print($PEAK / 2)")" --eval-batches 1)
run() {  # run <name> <args...>
  local name=$1
  shift
  mpirun -np 2 --bind-to none "$WEFT" train "${args[@]}" "$@" --out "$name" >"$name.log" 2>&1 ||
    { tail -20 "$name.log"; exit 1; }
}
run moe_ep1 --model-dir moe
run moe_ep2 --model-dir moe --ep 2
run dense --model-dir dense
echo "load after: $(bench_load)"
OUT=${OUT:-$BUILD_DIR/moe_bench.md}
python3 - moe_ep1 moe_ep2 dense <<'PY' | tee "$OUT"
import json, sys
print("| run | tokens/s | share of peak | ep all-to-all | dp all-reduce | max/min load step 1 | last step | mean | max/mean, mean | loss at end |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for d in sys.argv[1:]:
    steps = [j for j in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in j and "step" in j]
    timed = steps[1:]
    mean = lambda xs: sum(xs) / len(xs)
    def share(group):
        return mean([j["comm"].get(group, {}).get("total", {}).get("seconds", 0) / j["step_time_s"]
                     for j in timed])
    def ratio(j):
        # An expert that got nothing counts as 1 token (else one idle expert makes it inf).
        return mean([mx / max(mn, 1) for mx, mn in zip(j["moe_tokens_max"], j["moe_tokens_min"])])
    def busiest(j):  # max over the balanced share, k slots per token over E experts
        return mean([mx / (8 * 128 * 2 / 8) for mx in j["moe_tokens_max"]])
    moe = "moe_tokens_max" in steps[0]
    load = (f"{ratio(steps[0]):.2f} | {ratio(steps[-1]):.2f} | {mean([ratio(j) for j in steps]):.2f}"
            f" | {mean([busiest(j) for j in steps]):.2f}" if moe else "- | - | - | -")
    print(f"| {d} | {mean([j['tokens_per_s'] for j in timed]):.0f} | "
          f"{100 * mean([j['mfu'] for j in timed]):.1f}% | {100 * share('ep'):.1f}% | "
          f"{100 * share('dp'):.1f}% | {load} | {steps[-1]['loss']:.3f} |")
PY
