#!/bin/bash
# Validates `weft plan` against `weft bench train` on this machine (docs/planner.md).
#
#   bench/validate_planner.sh [--quick] [--no-profile] [--mpi] [--cp | --cp-only]
#
# With --mpi --cp it measures 31 layouts (--quick: fewer), 3 steps each by default (STEPS);
# it needs both cores for about 20 minutes, so run it on an otherwise idle machine:
#   cmake --build build --target weft && bench/validate_planner.sh --mpi --cp
# 1. profiles the machine into $OUT/local.json (`weft profile`; skipped with --no-profile, which
#    uses configs/clusters/local.json), and with --mpi also into $OUT/local-2rank.json under
#    `mpirun -np 2`;
# 2. runs each layout with `weft bench train --json` (one process; with --mpi also two ranks:
#    data parallel with ZeRO 0-3, tensor parallel with and without sequence parallelism, and a
#    pipeline under each schedule); with --cp (or --cp-only, which runs nothing else) context
#    parallelism at cp 2, ring and Ulysses, through `weft train` on the Shakespeare tokens, as
#    `weft bench train` refuses --cp (its synthetic fill writes whole sequences): the step time
#    is the median of the steps after the first, the peak the last step's peak RSS of rank 0
#    (the cp ranks are symmetric), before the final evaluation and checkpoint;
# 3. asks `weft plan --json` for the same layout and prints predicted against measured step
#    time and peak memory (the most of any rank, as the planner gives the fullest stage), and the
#    planner's memory against the engine's own estimate.
# Environment: WEFT (default build/weft), OUT (default bench/out/planner), STEPS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT=${WEFT:-build/weft}
OUT=${OUT:-bench/out/planner}
STEPS=${STEPS:-3}
PROFILE=1 MPI=0 QUICK=0 CP=0
for a in "$@"; do
  case $a in
    --no-profile) PROFILE=0 ;;
    --mpi) MPI=1 ;;
    --quick) QUICK=1 ;;
    --cp) CP=1 ;;
    --cp-only) CP=2 ;;
    *) echo "usage: $0 [--quick] [--no-profile] [--mpi] [--cp | --cp-only]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
CLUSTER=configs/clusters/local.json
if [ $PROFILE = 1 ]; then
  "$WEFT" profile --out "$OUT/local.json" --name local >&2
  CLUSTER=$OUT/local.json
fi
PEAK=$(python3 -c "import json;print(json.load(open('$CLUSTER'))['device']['peak_tflops']['fp32']*1000)")

# preset global-batch seq-len ranks zero [engine flags of a model-parallel layout]
LAYOUTS=(
  "tiny 4 64 1 0" "tiny 8 128 1 0" "tiny 16 256 1 0" "tiny 32 256 1 0" "tiny 64 128 1 0"
  "gpt2 1 128 1 0" "gpt2 1 256 1 0" "gpt2 2 256 1 0" "gpt2 4 128 1 0" "gpt2 1 512 1 0"
  "gpt2 2 512 1 0"
)
[ $QUICK = 1 ] && LAYOUTS=("tiny 4 64 1 0" "tiny 16 256 1 0" "gpt2 1 128 1 0")
[ $CP = 2 ] && LAYOUTS=()
if [ $MPI = 1 ] || [ $CP != 0 ]; then
  if [ $PROFILE = 1 ]; then
    mpirun --allow-run-as-root --oversubscribe -np 2 "$WEFT" profile --out "$OUT/local-2rank.json" --name local-2rank >&2
  else
    cp configs/clusters/local-2rank.json "$OUT/local-2rank.json"
  fi
fi
if [ $CP != 0 ]; then
  # Context parallelism over 2 ranks: a sequence of 256 and of 1024 split in two, each kind
  # (TokenRing for GPT-2), and GPT-2 at a batch of 4 sequences of 1024.
  LAYOUTS+=("tiny 8 256 2 0 --cp 2 --cp-kind ring" "tiny 8 256 2 0 --cp 2 --cp-kind ulysses"
            "gpt2 1 1024 2 0 --cp 2 --cp-kind ring" "gpt2 1 1024 2 0 --cp 2 --cp-kind ulysses"
            "gpt2 1 1024 2 0 --cp 2 --ring-bidirectional" "gpt2 4 1024 2 0 --cp 2 --cp-kind ring")
  "$WEFT" prepare --input data/tinyshakespeare.txt --out "$OUT/data" --tokenizer-dir data >/dev/null
fi
if [ $MPI = 1 ]; then
  LAYOUTS+=("tiny 16 256 2 0" "tiny 16 256 2 1" "tiny 16 256 2 2" "tiny 16 256 2 3"
            "gpt2 2 256 2 0" "gpt2 2 256 2 3"
            # tensor parallel, with and without sequence parallelism
            "gpt2 4 1024 2 0 --tp 2" "gpt2 4 1024 2 0 --tp 2 --sequence-parallel"
            "gpt2 4 256 2 0 --tp 2 --sequence-parallel"
            # pipeline parallel: 8 micro-batches of one sequence, a GPT of width 512
            "gpt2 8 256 2 0 --pp 2 --pp-schedule gpipe --micro-batch-size 1 --n-layer 8 --n-embd 512 --n-head 8"
            "gpt2 8 256 2 0 --pp 2 --pp-schedule 1f1b --micro-batch-size 1 --n-layer 8 --n-embd 512 --n-head 8"
            "gpt2 8 256 2 0 --pp 2 --pp-schedule interleaved --vpp 2 --micro-batch-size 1 --n-layer 8 --n-embd 512 --n-head 8"
            # uneven stages: the head's stage a layer short, and the other way round
            "gpt2 8 256 2 0 --pp 2 --pp-schedule 1f1b --pp-layers 5,3 --micro-batch-size 1 --n-layer 8 --n-embd 512 --n-head 8"
            "gpt2 8 256 2 0 --pp 2 --pp-schedule 1f1b --pp-layers 3,5 --micro-batch-size 1 --n-layer 8 --n-embd 512 --n-head 8")
fi

# The planner's flags for the engine's: a fixed layout, and a model file for a reshaped preset.
plan_args() {  # plan_args <preset> <seq> <ranks> <engine flags...>
  local preset=$1 seq=$2 ranks=$3 tp=1 pp=1 cp=1 micro=0 layers="" width="" heads="" sp=--no-sp
  shift 3
  local extra=()
  while [ $# -gt 0 ]; do
    case $1 in
      --tp) tp=$2; shift ;;
      --pp) pp=$2; shift ;;
      --cp) cp=$2; shift ;;
      --cp-kind) extra+=("$1" "$2"); shift ;;
      --ring-bidirectional) extra+=("$1") ;;
      --sequence-parallel) sp=--sp ;;
      --pp-schedule|--vpp|--pp-layers) extra+=("$1" "$2"); shift ;;
      --micro-batch-size) micro=$2; shift ;;
      --n-layer) layers=$2; shift ;;
      --n-embd) width=$2; shift ;;
      --n-head) heads=$2; shift ;;
      *) echo "plan_args: unknown engine flag $1" >&2; exit 2 ;;
    esac
    shift
  done
  local model=$preset
  if [ -n "$layers$width$heads" ]; then
    model=$OUT/model-$preset-$layers-$width-$heads.json
    printf '{"name": "%s", "description": "%s reshaped", "vocab_size": 50257, "n_positions": %s, "n_layer": %s, "n_head": %s, "n_embd": %s}\n' \
      "$preset-$layers-$width" "$preset" "$seq" "$layers" "$heads" "$width" > "$model"
  fi
  echo --model "$model" --dp $((ranks / tp / pp / cp)) --tp "$tp" --pp "$pp" --cp "$cp" "$sp" "${extra[@]}" MICRO="$micro"
}

RESULTS=$OUT/results.jsonl
: > "$RESULTS"
for l in "${LAYOUTS[@]}"; do
  read -r preset batch seq ranks zero flags <<< "$l"
  read -ra flags <<< "${flags:-}"
  cluster=$CLUSTER peak=$PEAK launch=()
  if [ "$ranks" -gt 1 ]; then
    cluster=$OUT/local-2rank.json
    peak=$(python3 -c "import json;print(json.load(open('$cluster'))['device']['peak_tflops']['fp32']*1000)")
    launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks" --bind-to none)
  fi
  read -ra pargs <<< "$(plan_args "$preset" "$seq" "$ranks" "${flags[@]}")"
  micro=${pargs[-1]#MICRO=}
  unset 'pargs[-1]'
  dp=${pargs[3]}
  [ "$micro" = 0 ] && micro=$((batch / dp))
  echo "== $preset batch $batch seq $seq ranks $ranks zero $zero ${flags[*]}" >&2
  load=$(cut -d' ' -f1 /proc/loadavg)  # other jobs on the cores inflate measured times
  if [[ " ${flags[*]} " == *" --cp "* ]]; then
    run=$OUT/run-$preset-$batch-$seq$(printf '%s' "${flags[@]}")
    rm -rf "$run"
    "${launch[@]}" "$WEFT" train --model "$preset" --data "$OUT/data/tinyshakespeare_train.bin" \
      --batch-size "$batch" --seq-len "$seq" --steps "$((STEPS + 1))" --zero "$zero" \
      --peak-gflops "$peak" --eval-batches 1 "${flags[@]}" --out "$run" > "$run.log" 2>&1
    measured=$(python3 - "$run" "$preset" "$batch" "$seq" <<'PY'
import json, re, statistics, sys
run, preset, batch, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
start = next(l for l in lines if l.get("event") == "start")
steps = [l for l in lines if "step_time_s" in l]
# The estimate without the checkpoint writer's staging, which the planner does not count and
# which the last step's peak predates.
log = open(run + ".log").read()
est = re.search(r"memory estimate per rank: .* = ([0-9.]+) MiB", log)
staging = re.search(r"checkpoint staging ([0-9.]+) MiB", log)
print(json.dumps({"preset": preset, "batch_size": batch, "seq_len": seq,
                  "layout": start["layout"], "micro_batches": batch // start["micro_batch_size"],
                  "micro_batch_size": start["micro_batch_size"], "parameters": 0,
                  "step_s": statistics.median(s["step_time_s"] for s in steps[1:]),
                  "peak_rss_max_bytes": steps[-1]["peak_rss_bytes"],
                  "estimate_max_bytes": (float(est.group(1)) - float(staging.group(1) if staging else 0)) * 2**20}))
PY
)
  else
    measured=$("${launch[@]}" "$WEFT" bench train --preset "$preset" --batch-size "$batch" \
      --seq-len "$seq" --steps "$STEPS" --zero "$zero" --peak-gflops "$peak" "${flags[@]}" --json | tail -1)
  fi
  predicted=$("$WEFT" plan "${pargs[@]}" --cluster "$cluster" --global-batch "$batch" \
    --seq-len "$seq" --dtype fp32 --micro-batch "$micro" --zero "$zero" --recompute none --json)
  python3 -c 'import json,sys; print(json.dumps({"measured": json.loads(sys.argv[1]), "predicted": json.loads(sys.argv[2]), "load": float(sys.argv[3])}))' \
    "$measured" "$predicted" "$load" >> "$RESULTS"
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | batch x seq | layout | step measured | step predicted | error | peak RSS | predicted memory | error | engine estimate - planner | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
terr, merr = [], []
for r in rows:
    m, p = r["measured"], r["predicted"]
    b = (p["best"] or [p.get("best_unfitting")])[0]
    ps, pm = b["step_s"], b["memory_bytes"]["total"]
    et = ps / m["step_s"] - 1
    em = pm / m['peak_rss_max_bytes'] - 1
    terr.append(abs(et)); merr.append(abs(em))
    layout = " ".join(f for f in m["layout"].split() if f not in ("dp=1", "tp=1", "pp=1", "cp=1", "ep=1", "zero=0"))
    if m["micro_batches"] > 1: layout += f" m={m['micro_batches']}x{m['micro_batch_size']}"
    print(f"| {m['preset']}{'' if m['parameters'] in (0, 124439808) or m['preset'] != 'gpt2' else ' ' + str(m['parameters'] // 10**6) + 'M'} | {m['batch_size']} x {m['seq_len']} | {layout or 'one process'} "
          f"| {m['step_s']:.3f} s | {ps:.3f} s | {100*et:+.1f}% "
          f"| {m['peak_rss_max_bytes']/2**20:.1f} MiB | {pm/2**20:.1f} MiB | {100*em:+.1f}% "
          f"| {(m['estimate_max_bytes']-pm)/2**20:+.2f} MiB | {r['load']:.1f} |")
print(f"\nmean |error|: step time {100*sum(terr)/len(terr):.1f}% (target 25%), "
      f"peak memory {100*sum(merr)/len(merr):.1f}% (target 15%) over {len(rows)} layouts")
PY
