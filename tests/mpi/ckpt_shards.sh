#!/usr/bin/env bash
# Sharded checkpoints (every rank writes its own shard; docs/checkpoints.md) end to end:
# ckpt_shards.sh <weft> <dp_check> <source dir> <mode>
#   async    --async-checkpoint writes the same files, byte for byte, as a synchronous save
#            (dp 2 ZeRO 1 and tp 2 x pp 2, a checkpoint every step)
#   reshard  2 steps at one layout, 2 more at another (dp 2 ZeRO 1 -> tp 2; pp 2 -> dp 2 ZeRO 3;
#            tp 2 x pp 2 -> one process; Llama's kv-head shards: llama_train_resume's
#            tp 2 -> pp 2 -> dp 2 ZeRO 3 -> one process): every step's loss
#            within 1e-5 (relative) of the uninterrupted single-process run, final weights within
#            1e-4, as the other resume tests; `weft ckpt convert --to-hf` equals `weft export`
#   optimizers  --optimizer adamw8bit, lion and mezo: 2 steps at dp 2 ZeRO 1 (sharded states, so
#            the parity of a sharded step with one process), then resumed at dp 4 ZeRO 3 and in
#            one process: every step's loss within the stated tolerance of the uninterrupted
#            single-process run (docs/memory.md: lion and mezo 1e-5; adamw8bit 5e-4, its blocks
#            cut by slice boundaries and requantised at the resume); mezo refuses --pp 2
#   corrupt  the newest checkpoint's shard truncated, or one byte flipped: `weft ckpt inspect`
#            says BAD (exit 1), `weft eval` on it is an error naming the file, and --resume names
#            the file, resumes from the previous checkpoint (kept although --keep-checkpoints is
#            1) and ends with the uninterrupted run's weights; a resume with another --lr is
#            refused
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3 MODE=$4
source "$SRC/tests/mpi/train_lib.sh"

reference() {  # reference <name> args...: the single-process run
  local name=$1
  shift
  "$WEFT" train "${args[@]}" "$@" --out "$name" >"$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}
last_loss() { grep '"loss"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([^,}]*\).*/\1/'; }

case $MODE in
async)
  for layout in "2 --zero 1" "4 --tp 2 --pp 2 --micro-batch-size 2"; do
    read -r np rest <<<"$layout"
    name=$(echo "$np$rest" | tr -d ' -')
    train "$np" sync_$name --steps 3 --save-every 1 $rest
    train "$np" async_$name --steps 3 --save-every 1 --async-checkpoint $rest
    files=0
    for f in sync_$name/checkpoints/step_*/*; do
      g=async_$name/${f#sync_$name/}
      check cmp "$f" "$g"
      files=$((files + 1))
    done
    echo "$name: $files files compared"
    check [ "$files" -ge 6 ]
    check "$CHECK" losses sync_$name async_$name 0
  done
  ;;
reshard)
  reference ref --steps 4
  # `weft ckpt convert --to-hf` writes what `weft export` writes.
  check "$WEFT" ckpt convert ref --to-hf hf_convert
  check "$WEFT" export --ckpt ref --out hf_export
  check cmp hf_convert/model.safetensors hf_export/model.safetensors
  check cmp hf_convert/config.json hf_export/config.json
  for pair in "2 --zero 1|2 --tp 2" \
              "2 --pp 2 --micro-batch-size 2|2 --zero 3" \
              "4 --tp 2 --pp 2 --micro-batch-size 2|1"; do
    IFS='|' read -r from to <<<"$pair"
    read -r n1 a1 <<<"$from"
    read -r n2 a2 <<<"$to"
    run=$(echo "${from}_to_$to" | tr -d ' -' | tr '|' '_')
    train "$n1" "$run" --steps 4 --exit-after 2 $a1
    train "$n2" "$run" --steps 4 --resume $a2
    check grep -q "resumed from" "$run.log"
    check "$CHECK" losses ref "$run" 1e-5
    check "$CHECK" weights "$(ckpt ref 4)" "$(ckpt "$run" 4)" 1e-4
  done
  ;;
optimizers)
  for pair in "lion 1e-5" "mezo 1e-5" "adamw8bit 5e-4"; do
    read -r opt tol <<<"$pair"
    reference ref_$opt --steps 4 --optimizer $opt
    train 2 ${opt}_dp2 --steps 4 --exit-after 2 --zero 1 --optimizer $opt
    cp -r ${opt}_dp2 ${opt}_dp1
    train 4 ${opt}_dp2 --steps 4 --resume --zero 3 --optimizer $opt
    train 1 ${opt}_dp1 --steps 4 --resume --optimizer $opt
    for run in ${opt}_dp2 ${opt}_dp1; do
      check grep -q "resumed from" "$run.log"
      check "$CHECK" losses ref_$opt "$run" "$tol"
    done
  done
  expect_error 2 "--optimizer mezo with --pp 2: the pipeline's schedules interleave backward" \
    --optimizer mezo --pp 2 --micro-batch-size 2
  ;;
corrupt)
  reference ref --steps 4
  # The learning-rate schedule is part of the saved state: a resume that changes it is refused.
  out=$("$WEFT" train "${args[@]}" --steps 4 --resume --lr 2e-3 --out ref 2>&1)
  rc=$?
  echo "$out" | grep error
  check [ $rc -ne 0 ]
  check grep -qF "resuming with --lr 0.002 but the checkpoint was trained with 0.001; the learning-rate schedule would change" <<<"$out"
  train 2 base --steps 4 --exit-after 3 --save-every 1 --zero 1 --keep-checkpoints 1
  check [ -d "$(ckpt base 2)" ]  # two are kept: the previous one survives --keep-checkpoints 1
  check [ ! -d "$(ckpt base 1)" ]
  check "$WEFT" ckpt inspect base
  for how in truncate flip; do
    run=$how
    cp -r base $run
    shard=$(ckpt $run 3)/rank_00001.bin
    if [ $how = truncate ]; then
      truncate -s -4096 "$shard"
    else
      printf '\x5a' | dd of="$shard" bs=1 seek=1000 conv=notrunc status=none
    fi
    out=$("$WEFT" ckpt inspect $run 2>&1)
    rc=$?
    echo "$out" | grep -E "BAD|error"
    check [ $rc -ne 0 ]
    check grep -q "rank_00001.bin .*BAD" <<<"$out"
    check grep -q "rank_00000.bin .*OK" <<<"$out"
    out=$("$WEFT" eval --ckpt "$(ckpt $run 3)" --data data/tinyshakespeare_val.bin --batch-size 2 --seq-len 32 2>&1)
    rc=$?
    echo "$out" | grep error
    check [ $rc -ne 0 ]
    check grep -qF "$shard" <<<"$out"
    train 2 $run --steps 4 --resume --zero 1 --keep-checkpoints 1
    grep "damaged" $run.log
    check grep -qF "$shard" $run.log
    check grep -q "resuming from the previous committed checkpoint .*step_000002" $run.log
    check "$CHECK" weights "$(ckpt ref 4)" "$(ckpt $run 4)" 1e-4
    a=$(last_loss ref) b=$(last_loss $run)
    echo "step 4 loss: uninterrupted $a, resumed after $how $b"
    check awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / a; exit !(d <= 1e-5 && d >= -1e-5) }'
  done
  ;;
*)
  echo "unknown mode $MODE"
  exit 2
  ;;
esac
finish
