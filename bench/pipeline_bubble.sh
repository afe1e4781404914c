#!/usr/bin/env bash
# Measured pipeline bubble against the simulator's prediction, for each schedule, on this
# machine: bench/pipeline_bubble.sh [build dir] [pp] [micro-batches]
# Trains a GPT of width 512 (GPT-2 vocabulary, T 256, micro-batches of one sequence) for 4 steps
# per schedule with --trace and prints the last step's bubble: measured (1 - compute / (pp x step
# time)), simulated from the step's own mean forward/backward time per chunk, and the paper's
# formula, with each rank's mean forward and backward time per chunk from the trace (for the
# zero-bubble schedules B + W, then T_B and T_W apart), each stage's activation bytes and peak
# resident memory, and each stage's idle share of the step, measured [simulated]. The
# zero-bubble schedules time their
# first step and run the later ones (the traced fourth among them) as made for those costs.
# The ranks are bound to cores (mpirun --map-by core --bind-to core:overload-allowed, Open MPI
# 4's spelling for more ranks than cores: rank r on core r mod the cores, so at pp 4 on 2 cores
# stages 0 and 2 share core 0, 1 and 3 core 1; at pp 2 each has its own), which the trace records
# and the simulation follows: each core shared only among the stages bound to it. Unbound, the
# kernel splits 3 busy ranks over 2 cores as it likes, differently from run to run.
# "worst stage" is the stage whose idle share is furthest from the simulated one, relative to it
# (stages that idle less than 0.05 of the step are compared in absolute terms and shown as such).
# Two cases: 8 layers split evenly (the head on the last stage makes it the slow one), and
# layers split so that the stages do about the same work per micro-batch, the head counting as
# about 4 layers (F + B + W): at pp 2, 16 layers (zb-v's V puts the head's chunk on rank 0 beside
# the first: 2,6,6,2); at pp 4, 24 layers (7,7,7,3; zb-v 1,4,4,3,4,3,4,1).
set -euo pipefail
BUILD=${1:-build} PP=${2:-2} M=${3:-8}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
echo "load: $(bench_load); pp $PP, $M micro-batches of 1 x 256 tokens, 1 thread per rank"
printf "%-7s %-9s %-12s %-9s %-9s %-7s %-7s %-17s %-17s %-23s %-12s %-9s %s\n" layers split \
  schedule measured simulated ideal step "act MB/stage" "peak MiB/stage" "idle/stage meas [sim]" \
  "worst stage" cores "per rank: mean F / B+W per chunk (ms) [B / W]"

# Mean forward and backward duration per rank from a Chrome trace (one key per line, as weft
# writes it).
rank_means() {
  awk '/"cat":/ { c = $2; gsub(/[",]/, "", c) }
       /"dur":/ { d = $2; gsub(/,/, "", d) }
       /"pid":/ { p = $2; gsub(/,/, "", p) }
       /^[[:space:]]*}/ { if (c == "forward" || c ~ /^backward/) { s[p, c] += d; n[p, c]++ } c = "" }
       END { for (r = 0; (r, "forward") in n; ++r) {
               if ((r, "backward") in n) {
                 printf "%s%d: %.0f / %.0f", (r ? ", " : ""), r,
                        s[r, "forward"] / n[r, "forward"] / 1000, s[r, "backward"] / n[r, "backward"] / 1000
               } else {
                 b = s[r, "backward_input"] / n[r, "backward_input"] / 1000
                 w = s[r, "backward_weight"] / n[r, "backward_weight"] / 1000
                 printf "%s%d: %.0f / %.0f [%.0f / %.0f]", (r ? ", " : ""), r,
                        s[r, "forward"] / n[r, "forward"] / 1000, b + w, b, w
               }
             } }' "$1"
}
field() { grep '"event":"pipeline_trace"' "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
# A per-stage list of the pipeline_trace line, to 3 decimals: "0.091 0.164"; with a divisor
# and a format, bytes in MB or MiB: stages FILE activation_bytes 1000000 %.1f.
stages() {
  grep '"event":"pipeline_trace"' "$1" | grep -o "\"$2\":\[[^]]*\]" | cut -d'[' -f2 | tr -d ']' \
    | tr ',' '\n' | awk -v d="${3:-1}" -v f="${4:-%.3f}" '{ printf (NR > 1 ? " " : "") f, $1 / d }'
}

# The stage whose measured idle share is furthest from the simulated one: "12% s0" (relative), or
# "+0.031 s3" (absolute, when the simulated share is under 0.05).
worst_stage() {
  awk -v m="$1" -v s="$2" 'BEGIN { n = split(m, a, " "); split(s, b, " "); best = -1
    for (i = 1; i <= n; ++i) {
      rel = b[i] >= 0.05; d = rel ? (a[i] - b[i]) / b[i] : a[i] - b[i]
      key = (d < 0 ? -d : d) / (rel ? 1 : 0.05)
      if (key > best) { best = key; out = rel ? sprintf("%+.0f%% s%d", 100 * d, i - 1) : sprintf("%+.3f s%d", d, i - 1) }
    }
    print out }'
}

run() {  # run <layers> <schedule> [--pp-layers split]
  local layers=$1 sched=$2 split=even extra=()
  shift 2
  [ $# -gt 0 ] && split=$2 && extra+=("$@")
  [ "$sched" = interleaved ] && extra+=(--vpp 2)
  RUNS=$((${RUNS:-0} + 1))
  local out="run${RUNS}_${layers}_${sched}_$split"
  mpirun -np "$PP" --map-by core --bind-to core:overload-allowed "$WEFT" train --model gpt2 \
    --n-layer "$layers" --n-embd 512 --n-head 8 --data data/tinyshakespeare_train.bin --batch-size "$M" --micro-batch-size 1 \
    --seq-len 256 --steps 4 --threads 1 --peak-gflops 100 --pp "$PP" --pp-schedule "$sched" \
    "${extra[@]}" --trace "$out.json" --out "$out" >/dev/null 2>&1
  local step idle_m idle_s
  step=$(grep '"step":4,' "$out/metrics.jsonl" | grep -o '"step_time_s":[0-9.e+-]*' | cut -d: -f2)
  idle_m=$(stages "$out/metrics.jsonl" idle_measured) idle_s=$(stages "$out/metrics.jsonl" idle_simulated)
  printf "%-7s %-9s %-12s %-9.3f %-9.3f %-7.3f %-7.2f %-17s %-17s %-23s %-12s %-9s %s\n" "$layers" "$split" \
    "$sched" "$(field "$out/metrics.jsonl" bubble_measured)" \
    "$(field "$out/metrics.jsonl" bubble_simulated)" "$(field "$out/metrics.jsonl" bubble_ideal)" \
    "$step" "$(stages "$out/metrics.jsonl" activation_bytes 1000000 %.1f)" \
    "$(stages "$out/metrics.jsonl" peak_rss_bytes 1048576 %.0f)" \
    "$idle_m [$idle_s]" "$(worst_stage "$idle_m" "$idle_s")" \
    "$(stages "$out/metrics.jsonl" stage_cores 1 %d | tr ' ' ,)" "$(rank_means "$out.json")"
}

for sched in gpipe 1f1b interleaved zb-h1 zb-v; do run 8 $sched; done
if [ "$PP" = 2 ]; then
  run 16 gpipe --pp-layers 12,4
  # 1F1B and zb-h1 back to back (other jobs share the cores), twice.
  for i in 1 2; do
    run 16 1f1b --pp-layers 12,4
    run 16 zb-h1 --pp-layers 12,4
  done
  run 16 interleaved --pp-layers 6,2,6,2
  run 16 zb-v --pp-layers 2,6,6,2
elif [ "$PP" = 4 ]; then
  for i in 1 2; do
    run 24 1f1b --pp-layers 7,7,7,3
    run 24 zb-h1 --pp-layers 7,7,7,3
  done
  run 24 zb-v --pp-layers 1,4,4,3,4,3,4,1
fi
echo "load after: $(bench_load)"
