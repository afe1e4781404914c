#!/usr/bin/env bash
# Context parallelism at long sequences on this machine (docs/performance.md, "Context
# parallelism"): one process with two threads against cp 2 (ring, TokenRing, Ulysses; 2 ranks of
# one thread) and cp 4 (ring and the hybrid, Ulysses in pairs with the ring across them: 4 ranks
# of one thread, so two ranks share each core), batch 1, synthetic tokens (`weft bench train`).
#   bench/long_context.sh [build dir] [seq len] [timed steps] [preset] [layers]
# Defaults: build, 8192, 2, tiny, 2 (a 2-layer tiny: attention is most of its step, and a step of
# GPT-2 124M at T = 8192 takes minutes on two cores). Prints per layout: step time, tokens/s,
# model GFLOP/s and the measured peak, the cp bytes a rank put on the wire per step (bus bytes)
# and the time per step it spent inside cp calls and waiting on them (what was not hidden behind
# attention), and rank 0's peak RSS against the engine's estimate.
set -euo pipefail
BUILD=${1:-build} T=${2:-8192} STEPS=${3:-2} PRESET=${4:-tiny} LAYERS=${5:-2}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
args=(--preset "$PRESET" --n-layer "$LAYERS" --batch-size 1 --seq-len "$T" --steps "$STEPS" --json)
num() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
report() {  # report <name> <json file>
  local j cp bus=0 secs=0 wait=0
  j=$(tail -1 "$2")
  cp=$(grep -o '"cp":{.*' <<<"$j" | grep -o '"total":{[^}]*}' | head -1 || true)
  if [ -n "$cp" ]; then
    bus=$(num bus_bytes <<<"$cp") secs=$(num seconds <<<"$cp") wait=$(num wait_seconds <<<"$cp")
  fi
  awk -v n="$1" -v s="$(num step_s <<<"$j")" -v t="$(num tokens_per_s <<<"$j")" \
    -v g="$(num achieved_gflops <<<"$j")" -v p="$(num peak_gflops <<<"$j")" -v b="$bus" \
    -v c="$secs" -v w="$wait" -v k="$STEPS" -v r="$(num peak_rss_bytes <<<"$j")" \
    -v e="$(num estimate_bytes <<<"$j")" 'BEGIN {
      printf "| %s | %.2f | %.0f | %.1f | %.1f | %s | %s | %.0f (%.0f) |\n", n, s, t, g, p,
        (b > 0 ? sprintf("%.2f MiB", b / k / 1048576) : "-"),
        (b > 0 ? sprintf("%.3f s (%.1f%%)", (c + w) / k, 100 * (c + w) / k / s) : "-"),
        r / 1048576, e / 1048576 }'
}
echo "$PRESET, $LAYERS layers, T = $T, batch 1, $STEPS timed steps; load before: $(bench_load)"
echo "| layout (2 cores) | step s | tokens/s | model GFLOP/s | peak GFLOP/s (2 threads) | cp bus bytes per rank and step | cp calls + waits per step | peak RSS MiB (estimate) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
"$WEFT" bench train "${args[@]}" --threads 2 >cp1.json
report "cp 1, 2 threads" cp1.json
run() {  # run <name> <ranks> <flags...>
  local name=$1 np=$2
  shift 2
  mpirun -np "$np" --bind-to none "$WEFT" bench train "${args[@]}" --threads 1 "$@" >"$name.json"
  report "$name" "$name.json"
}
run "cp 2 ring" 2 --cp 2
run "cp 2 TokenRing" 2 --cp 2 --ring-bidirectional
run "cp 2 Ulysses" 2 --cp 2 --cp-kind ulysses
run "cp 4 ring (4 ranks)" 4 --cp 4
run "cp 4 hybrid, Ulysses 2 (4 ranks)" 4 --cp 4 --cp-kind hybrid --cp-ulysses 2
echo "load after: $(bench_load)"
