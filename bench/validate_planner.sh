#!/bin/bash
# Validates `weft plan` against `weft bench train` on this machine (docs/planner.md).
#
#   bench/validate_planner.sh [--quick] [--no-profile] [--mpi]
#
# 1. profiles the machine into $OUT/local.json (`weft profile`; skipped with --no-profile, which
#    uses configs/clusters/local.json), and with --mpi also into $OUT/local-2rank.json under
#    `mpirun -np 2`;
# 2. runs each layout with `weft bench train --json` (one process; with --mpi also data parallel
#    over 2 ranks, ZeRO 0-3);
# 3. asks `weft plan --json` for the same layout and prints predicted against measured step
#    time and peak memory, and the planner's memory against the engine's own estimate.
# Environment: WEFT (default build/weft), OUT (default bench/out/planner), STEPS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT=${WEFT:-build/weft}
OUT=${OUT:-bench/out/planner}
STEPS=${STEPS:-3}
PROFILE=1 MPI=0 QUICK=0
for a in "$@"; do
  case $a in
    --no-profile) PROFILE=0 ;;
    --mpi) MPI=1 ;;
    --quick) QUICK=1 ;;
    *) echo "usage: $0 [--quick] [--no-profile] [--mpi]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
CLUSTER=configs/clusters/local.json
if [ $PROFILE = 1 ]; then
  "$WEFT" profile --out "$OUT/local.json" --name local >&2
  CLUSTER=$OUT/local.json
fi
PEAK=$(python3 -c "import json;print(json.load(open('$CLUSTER'))['device']['peak_tflops']['fp32']*1000)")

# preset global-batch seq-len ranks zero
LAYOUTS=(
  "tiny 4 64 1 0" "tiny 8 128 1 0" "tiny 16 256 1 0" "tiny 32 256 1 0" "tiny 64 128 1 0"
  "gpt2 1 128 1 0" "gpt2 1 256 1 0" "gpt2 2 256 1 0" "gpt2 4 128 1 0" "gpt2 1 512 1 0"
  "gpt2 2 512 1 0"
)
[ $QUICK = 1 ] && LAYOUTS=("tiny 4 64 1 0" "tiny 16 256 1 0" "gpt2 1 128 1 0")
if [ $MPI = 1 ]; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$WEFT" profile --out "$OUT/local-2rank.json" --name local-2rank >&2
  LAYOUTS+=("tiny 16 256 2 0" "tiny 16 256 2 1" "tiny 16 256 2 2" "tiny 16 256 2 3"
            "gpt2 2 256 2 0" "gpt2 2 256 2 3")
fi

RESULTS=$OUT/results.jsonl
: > "$RESULTS"
for l in "${LAYOUTS[@]}"; do
  read -r preset batch seq ranks zero <<< "$l"
  cluster=$CLUSTER peak=$PEAK launch=()
  if [ "$ranks" -gt 1 ]; then
    cluster=$OUT/local-2rank.json
    peak=$(python3 -c "import json;print(json.load(open('$cluster'))['device']['peak_tflops']['fp32']*1000)")
    launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
  fi
  echo "== $preset batch $batch seq $seq ranks $ranks zero $zero" >&2
  load=$(cut -d' ' -f1 /proc/loadavg)  # other jobs on the cores inflate measured times
  measured=$("${launch[@]}" "$WEFT" bench train --preset "$preset" --batch-size "$batch" \
    --seq-len "$seq" --steps "$STEPS" --zero "$zero" --peak-gflops "$peak" --json | tail -1)
  predicted=$("$WEFT" plan --model "$preset" --cluster "$cluster" --global-batch "$batch" \
    --seq-len "$seq" --dtype fp32 --dp "$ranks" --micro-batch $((batch / ranks)) --zero "$zero" \
    --recompute none --json)
  python3 -c 'import json,sys; print(json.dumps({"measured": json.loads(sys.argv[1]), "predicted": json.loads(sys.argv[2]), "load": float(sys.argv[3])}))' \
    "$measured" "$predicted" "$load" >> "$RESULTS"
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | batch x seq | ranks | zero | step measured | step predicted | error | peak RSS | predicted memory | error | engine estimate - planner | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
terr, merr = [], []
for r in rows:
    m, p = r["measured"], r["predicted"]
    b = (p["best"] or [p.get("best_unfitting")])[0]
    ps, pm = b["step_s"], b["memory_bytes"]["total"]
    et = ps / m["step_s"] - 1
    em = pm / m["peak_rss_bytes"] - 1
    terr.append(abs(et)); merr.append(abs(em))
    print(f"| {m['preset']} | {m['batch_size']} x {m['seq_len']} | {m['ranks']} | {m['zero']} "
          f"| {m['step_s']:.3f} s | {ps:.3f} s | {100*et:+.1f}% "
          f"| {m['peak_rss_bytes']/2**20:.1f} MiB | {pm/2**20:.1f} MiB | {100*em:+.1f}% "
          f"| {(m['estimate_bytes']-pm)/2**20:+.2f} MiB | {r['load']:.1f} |")
print(f"\nmean |error|: step time {100*sum(terr)/len(terr):.1f}% (target 25%), "
      f"peak memory {100*sum(merr)/len(merr):.1f}% (target 15%) over {len(rows)} layouts")
PY
