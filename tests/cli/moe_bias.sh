# Aux-loss-free balancing (--moe-router-bias-update-rate): with the router's losses off, the
# bias moves each step by the rate against the batch's load (every value a multiple of the rate,
# at most steps x rate), the expert load evens out compared with the same run without it, and an
# interrupted run resumes with the saved bias (losses bit-identical, the same final bias).
source "$(dirname "$0")/lib.sh"
prepare_data
R=0.02
args=(--model moe-tiny --data data/tinyshakespeare_train.bin --steps 6 --batch-size 4
      --seq-len 32 --lr 1e-3 --warmup 2 --peak-gflops 100 --moe-aux-loss-coef 0
      --moe-z-loss-coef 0 --eval-batches 1)
"$WEFT" train "${args[@]}" --out plain 2>/dev/null
"$WEFT" train "${args[@]}" --moe-router-bias-update-rate $R --out straight 2>/dev/null
"$WEFT" train "${args[@]}" --moe-router-bias-update-rate $R --out split --exit-after 3 2>/dev/null
"$WEFT" train "${args[@]}" --moe-router-bias-update-rate $R --out split --resume 2>/dev/null

# Mean over layers of max/min tokens per expert, averaged over steps 2..6 (the bias of step 1
# routes step 2 on).
imbalance() {
  grep '"moe_tokens_max"' "$1" | tail -n +2 | awk '{
    match($0, /"moe_tokens_max":\[[^]]*\]/); mx = substr($0, RSTART + 18, RLENGTH - 19)
    match($0, /"moe_tokens_min":\[[^]]*\]/); mn = substr($0, RSTART + 18, RLENGTH - 19)
    n = split(mx, a, ","); split(mn, b, ","); s = 0
    for (i = 1; i <= n; i++) s += a[i] / (b[i] > 1 ? b[i] : 1)
    r += s / n; k++
  } END { printf "%.3f\n", r / k }'
}
a=$(imbalance plain/metrics.jsonl) b=$(imbalance straight/metrics.jsonl)
echo "max/min load, steps 2-6: without the bias $a, with it $b"
awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' && ok "the bias evens the load ($b < $a)" ||
  bad "the bias does not even the load ($b >= $a)"

# The saved bias (the manifest's run.moe_router_bias, comma-separated): multiples of the rate,
# moved at most 3 x rate, not all zero. awk, not a JSON tool: neither python nor jq is on a
# fresh Debian.
bias() { tr -d ' \n' <"$1" | grep -o '"moe_router_bias":\[[^]]*\]' | sed 's/.*:\[//; s/\]$//'; }
b3=$(bias split/checkpoints/step_000003/manifest.json)
echo "bias after 3 steps: $b3"
awk -v list="$b3" -v r=$R 'BEGIN {
  n = split(list, x, ","); moved = 0; good = n > 0
  for (i = 1; i <= n; i++) {
    q = x[i] / r; d = q - int(q + (q < 0 ? -0.5 : 0.5)); if (d < 0) d = -d
    if (d >= 1e-3 || (x[i] < 0 ? -x[i] : x[i]) > 3 * r + 1e-6) good = 0
    if (x[i] != 0) moved = 1
  }
  exit !(good && moved)
}' && ok "bias moved by multiples of the rate, at most 3 x rate" || bad "bias $b3"
[ "$(bias straight/checkpoints/step_000006/manifest.json)" = "$(bias split/checkpoints/step_000006/manifest.json)" ] &&
  ok "resumed run ends with the same bias" || bad "final bias differs after resume"
l1=$(metric straight/metrics.jsonl loss | tr '\n' ' ') l2=$(metric split/metrics.jsonl loss | tr '\n' ' ')
[ "$l1" = "$l2" ] && ok "losses bit-identical across the resume" || bad "losses differ: $l1 / $l2"
l0=$(metric plain/metrics.jsonl loss | tail -1)
[ "$l0" != "$(metric straight/metrics.jsonl loss | tail -1)" ] && ok "the bias changes the routing" ||
  bad "the bias left the losses unchanged"

expect_error "--moe-router-bias-update-rate must be 0 (off) or a positive number, got -1" bad -- \
  train "${args[@]}" --moe-router-bias-update-rate -1 --out bad
expect_error "--moe-router-bias-update-rate 0.1: model 'tiny' has no mixture-of-experts layers" bad2 -- \
  train --model tiny --data data/tinyshakespeare_train.bin --moe-router-bias-update-rate 0.1 --out bad2
finish
