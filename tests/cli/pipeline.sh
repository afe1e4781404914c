# `weft pipeline` draws a schedule without running a model and prints its bubble.
source "$(dirname "$0")/lib.sh"
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule interleaved --vpp 2 --svg s.svg --trace t.json)
echo "$out"
grep -q "bubble     0.1579 simulated, 0.1579 theory" <<<"$out" && ok "interleaved p=4 m=8 v=2 bubble 0.1579 = 3/19" || bad "bubble not printed as 0.1579"
[ "$(grep -c '<g class="rank"' s.svg)" -eq 4 ] && ok "svg has 4 rank rows" || bad "svg rows"
grep -q '"traceEvents"' t.json && ok "chrome trace written" || bad "no trace"
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule 1f1b)
grep -q "0.2727 simulated" <<<"$out" && ok "1f1b p=4 m=8 bubble 0.2727 = 3/11" || bad "1f1b bubble: $out"
expect_error "micro" "" -- pipeline --pp 4 --micro-batches 6 --pp-schedule interleaved --vpp 2
finish
