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
  python3 - "$1" <<'PY'
import json, sys
steps = [j for j in map(json.loads, open(sys.argv[1])) if "moe_tokens_max" in j]
r = [sum(a / max(b, 1) for a, b in zip(j["moe_tokens_max"], j["moe_tokens_min"])) /
     len(j["moe_tokens_max"]) for j in steps[1:]]
print(f"{sum(r) / len(r):.3f}")
PY
}
a=$(imbalance plain/metrics.jsonl) b=$(imbalance straight/metrics.jsonl)
echo "max/min load, steps 2-6: without the bias $a, with it $b"
python3 -c "import sys; sys.exit(0 if $b < $a else 1)" && ok "the bias evens the load ($b < $a)" ||
  bad "the bias does not even the load ($b >= $a)"

# The saved bias: multiples of the rate, moved at most steps x rate, not all zero.
bias() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"]["moe_router_bias"])' "$1"; }
b3=$(bias split/checkpoints/step_000003/manifest.json)
echo "bias after 3 steps: $b3"
python3 - "$b3" $R <<'PY' && ok "bias moved by multiples of the rate, at most 3 x rate" || bad "bias $b3"
import sys
b, r = eval(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if any(b) and all(abs(x / r - round(x / r)) < 1e-3 and abs(x) <= 3 * r + 1e-6 for x in b) else 1)
PY
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
