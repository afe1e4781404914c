#!/usr/bin/env bash
# Data-aware balancing (docs/long_context.md, "Data-aware balancing"): on a synthetic long-tailed
# corpus, dp 2 (2 ranks of one thread on 2 cores; dp x cp ranks with cp), --pack documents with
# static rows against --balance on the same steps (same seed, same windows). Prints per run: the
# max/min per-rank attention FLOPs over the dp x cp ranks (mean over the steps, and the worst
# step), the busiest rank's attention GFLOP, tokens max/min, rows a rank and padding, the bytes
# a rank receives on the cp axis a step, step time and tokens/s (means over the steps after the
# first), and the load average before and after.
#   bench/balance.sh [build dir] [seq len] [steps] [layers] [batch] [lengths] [documents] [dp]
#                    [cp]
# Defaults: build, 8192, 3, 2, 8, pareto:30:1.1, 10000, 2, 1: a 2-layer tiny GPT-2, 4 windows a
# rank (one micro-batch is one row, so a balanced step pads by whole rows only); 98% of the
# corpus's 9528 training documents under 1K tokens, 7 of 32K or more (up to 64K), a third of
# its 2.0M tokens in documents of 8K or more. With cp > 1 the ring (--cp-kind ring).
set -euo pipefail
BUILD=${1:-build} T=${2:-8192} STEPS=${3:-3} LAYERS=${4:-2} B=${5:-8}
LENGTHS=${6:-pareto:30:1.1} DOCS=${7:-10000} DP=${8:-2} CP=${9:-1}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
"$WEFT" prepare --synthetic "$DOCS" --lengths "$LENGTHS" --max-doc-len 65536 --seed 1 \
  --val-tokens $((B * T + T)) --out syn >/dev/null
args=(--model tiny --n-layer "$LAYERS" --n-positions "$T" --data syn/synthetic_train.bin
      --seq-len "$T" --batch-size "$B" --micro-batch-size 1 --steps "$STEPS" --pack documents
      --dp "$DP" --cp "$CP" --threads 1 --eval-batches 1 --peak-gflops 100)
[ "$CP" -gt 1 ] && args+=(--cp-kind ring)
# mean <field> <run>: over the steps (after the first when $3 is "timed"); max <field> <run>
mean() {
  { grep -o "\"$1\":[0-9.e+-]*" "$2/metrics.jsonl" || true; } | cut -d: -f2 |
    awk -v skip="${3:+1}" 'NR > skip { s += $1; n++ } END { printf "%.3g", n ? s / n : 0 }'
}
worst() { { grep -o "\"$1\":[0-9.e+-]*" "$2/metrics.jsonl" || true; } | cut -d: -f2 | sort -g | tail -1; }
# The bytes rank 0 receives on the cp axis, a step (a step whose ring never turned counts 0).
cp_bytes() {
  { grep '"step"' "$1/metrics.jsonl" | grep -o '"cp":{"recv":{"bus_bytes":[^,]*,"bytes":[0-9]*' || true; } |
    cut -d: -f5 | awk -v n="$STEPS" '{ s += $1 } END { printf "%.3g", s / n }'
}
echo "tiny, $LAYERS layers, T = $T, batch $B, dp $DP, cp $CP, $STEPS steps, $DOCS documents of $LENGTHS"
echo "| layout | attention FLOPs max/min (mean, worst step) | busiest rank's attention GFLOP | tokens max/min | rows a rank | padding tokens a step | cp bytes a step | step s | tokens/s | load before, after |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
run() {  # run <name> <flags...>
  local name=$1 before
  shift
  before=$(bench_load)
  mpirun -np $((DP * CP)) --bind-to none "$WEFT" train "${args[@]}" --out "$name" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; exit 1; }
  local rows pad
  rows=$(mean rows_per_rank "$name")
  pad=$(mean padding_tokens "$name")
  echo "| $name | $(mean rank_attention_flops_ratio "$name"), $(worst rank_attention_flops_ratio "$name" | xargs printf %.3g) | $(mean rank_attention_flops_max "$name" | awk '{ printf "%.1f", $1 / 1e9 }') | $(mean rank_tokens_ratio "$name") | ${rows/0/$((B / DP))} | $pad | $(cp_bytes "$name") | $(mean step_time_s "$name" timed) | $(mean tokens_per_s "$name" timed) | $before; $(bench_load) |"
}
run static
run balanced --balance
echo "The balanced run's own record of the static layout on the same steps: attention FLOPs max/min $(mean static_rank_attention_flops_ratio balanced) (worst $(worst static_rank_attention_flops_ratio balanced | xargs printf %.3g))"
