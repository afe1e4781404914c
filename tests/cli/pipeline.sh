# `weft pipeline` draws a schedule without running a model and prints its bubble.
source "$(dirname "$0")/lib.sh"
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule interleaved --vpp 2 --svg s.svg --trace t.json)
echo "$out"
grep -q "bubble     0.1579 simulated, 0.1579 theory" <<<"$out" && ok "interleaved p=4 m=8 v=2 bubble 0.1579 = 3/19" || bad "bubble not printed as 0.1579"
[ "$(grep -c '<g class="rank"' s.svg)" -eq 4 ] && ok "svg has 4 rank rows" || bad "svg rows"
grep -q '"traceEvents"' t.json && ok "chrome trace written" || bad "no trace"
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule 1f1b)
grep -q "0.2727 simulated" <<<"$out" && ok "1f1b p=4 m=8 bubble 0.2727 = 3/11" || bad "1f1b bubble: $out"
# The zero-bubble schedules: B and W drawn apart, the bubble below 1F1B's (zb-v lowest), every
# rank within 1F1B's first rank's activations.
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule zb-h1 --svg zb.svg)
grep -q "0.1724 simulated, 0.1111 theory" <<<"$out" && ok "zb-h1 p=4 m=8 bubble 0.1724 (paper 0.1111)" || bad "zb-h1: $out"
grep -q "W (weight gradients)" zb.svg && ok "svg legend shows W" || bad "no W in the svg"
out=$("$WEFT" pipeline --pp 4 --micro-batches 8 --pp-schedule zb-v --json)
grep -q '"bubble":0.0588' <<<"$out" && grep -q '"peak_in_flight":\[8,8,8,8\]' <<<"$out" \
  && ok "zb-v p=4 m=8 bubble 0.0588, 8 half-stage chunks a rank" || bad "zb-v: $out"
# Each stage's own costs (measured F/B/W, the last stage's forward running the head): zb-h1 made
# for them beats 1F1B, and each rank's idle share is printed.
costs=214/216/202,443/73/67
one=$("$WEFT" pipeline --pp 2 --micro-batches 8 --pp-schedule 1f1b --stage-costs $costs)
zb=$("$WEFT" pipeline --pp 2 --micro-batches 8 --pp-schedule zb-h1 --stage-costs $costs)
echo "$one"; echo "$zb"
grep -q "bubble     0.1306 simulated" <<<"$one" && grep -q "bubble     0.1092 simulated" <<<"$zb" \
  && ok "zb-h1 from stage costs 0.1092 < 1f1b 0.1306" || bad "stage costs: $one $zb"
grep -q "idle share per rank: 0.0733 0.1452" <<<"$zb" && ok "idle share per rank printed" \
  || bad "no idle share per rank"
"$WEFT" pipeline --pp 2 --pp-schedule zb-v --stage-costs $costs --json | grep -q '"idle_share":\[' \
  && ok "json has idle_share" || bad "json without idle_share"
# Stages sharing cores: GPipe's 2 stages on 1 core overlap in two actions that take twice as
# long (12 against 9); 4 on 2 cores, 27 against 21 (the unit tests work them out by hand).
out=$("$WEFT" pipeline --pp 2 --micro-batches 2 --pp-schedule gpipe --cores 1)
grep -q "makespan   12 " <<<"$out" && grep -q "on 1 shared cores" <<<"$out" \
  && ok "2 stages on 1 core: makespan 12" || bad "--cores 1: $out"
"$WEFT" pipeline --pp 4 --micro-batches 4 --pp-schedule gpipe --cores 2 --json | grep -q '"makespan":27' \
  && ok "4 stages on 2 cores: makespan 27" || bad "--cores 2"
# Bound to cores: ranks 0 and 2 share core 0, 1 and 3 core 1 (mpirun --bind-to core --map-by
# core), and a core idles while the other has two ranks: 30 (the unit test works it by hand).
out=$("$WEFT" pipeline --pp 4 --micro-batches 4 --pp-schedule gpipe --rank-cores 0,1,0,1 --json)
grep -q '"makespan":30' <<<"$out" && grep -q '"rank_cores":\[0,1,0,1\]' <<<"$out" \
  && ok "4 stages bound to cores 0,1,0,1: makespan 30" || bad "--rank-cores: $out"
"$WEFT" pipeline --pp 4 --micro-batches 4 --pp-schedule gpipe --rank-cores 0,1,0,1 | grep -q "on cores 0,1,0,1 (rank by rank)" \
  && ok "text names the cores" || bad "--rank-cores text"
expect_error "--rank-cores 0,1: 2 cores; expected one for each of the --pp 4 stages" "" -- pipeline --pp 4 --rank-cores 0,1
expect_error "--rank-cores 0,-1: core -1 is not a core; expected numbers >= 0" "" -- pipeline --pp 2 --rank-cores 0,-1
expect_error "--rank-cores binds each stage to its core; expected no --cores beside it" "" -- pipeline --pp 2 --rank-cores 0,0 --cores 1
expect_error "--cores -1: expected the number of processors the stages share, at least 0" "" -- pipeline --pp 2 --cores -1
expect_error "'443/73' is not a stage's costs; expected F/B/W" "" -- pipeline --pp 2 --stage-costs 1/1/1,443/73
expect_error "--stage-costs '1/1/1' has 1 stages; expected one F/B/W for each of the --pp 2" "" -- pipeline --pp 2 --stage-costs 1/1/1
expect_error "expected no --weight-share beside it" "" -- pipeline --pp 2 --stage-costs 1/1/1,1/1/1 --weight-share 0.3
expect_error "zb-v runs two chunks per rank in a V" "" -- pipeline --pp 4 --pp-schedule zb-v --vpp 3
expect_error "micro" "" -- pipeline --pp 4 --micro-batches 6 --pp-schedule interleaved --vpp 2
finish
