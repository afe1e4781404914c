# A short run of the tiny model on the bundled corpus lowers the validation loss clearly, and logs
# one JSON line per step with the promised fields. 30 steps take the validation loss from
# 10.84 (step 0) to 7.42, well past the 2 nats asked.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 30 \
  --batch-size 8 --seq-len 64 --lr 3e-3 --warmup 5 --eval-every 10 --eval-batches 4 \
  --peak-gflops 100 2> log.txt || { cat log.txt; exit 1; }
first=$(metric run/metrics.jsonl val_loss | head -1)
last=$(metric run/metrics.jsonl val_loss | tail -1)
init=$(metric run/metrics.jsonl loss | head -1)
echo "initial train loss $init (ln 50257 = 10.825), val loss $first -> $last"
awk -v a="$init" 'BEGIN { exit !(a > 10.6 && a < 11.0) }' && ok "initial loss near ln(vocab)" || bad "initial loss $init"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 2.0) }' && ok "val loss fell by more than 2 nats" || bad "val loss $first -> $last"
steps=$(grep -c '"loss"' run/metrics.jsonl)
[ "$steps" -eq 30 ] && ok "30 step lines" || bad "$steps step lines"
for key in step loss lr grad_norm tokens_per_s mfu; do
  grep -q "\"$key\"" run/metrics.jsonl && ok "metrics has $key" || bad "metrics lacks $key"
done
grep -q "eta" log.txt && ok "progress line shows ETA" || bad "no progress line"
[ -f run/checkpoints/latest ] && ok "final checkpoint" || bad "no checkpoint"
finish
