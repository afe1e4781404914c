#!/usr/bin/env bash
# weft bench rows on a tiny layer set with the peaks given (measuring them takes seconds): a row
# per dtype and M with its figures, against a given bandwidth or one probed between the passes;
# bad flags refused. weft bench bandwidth, the same triad alone: once, and once per input line.
# weft bench handoff: the time a cache line takes from one core to another.
source "$(dirname "$0")/lib.sh"

shape=(--n-layer 2 --n-embd 64 --kv-dim 32 --hidden 96 --vocab 256 --seconds 0.01
  --fp32-peak 400 --bf16-peak 800)
tiny=("${shape[@]}" --bandwidth-gbs 30)
out=$("$WEFT" bench rows "${tiny[@]}" --rows 1 5 2>&1)
for dtype in fp32 bf16; do
  for m in 1 5; do
    # dtype, M, eight figures (CPU ms and the bandwidth among them), then tokens/s against M = 1's
    want=$([ "$m" = 1 ] && echo "1\.0x" || echo "[0-9]+\.[0-9]x")
    if grep -qE "^$dtype +$m( +[0-9]+\.?[0-9]*%?){6} +30\.0 +[0-9.]+% +$want$" <<<"$out"; then
      ok "$dtype M=$m reported"
    else
      bad "no $dtype M=$m row in: $out"
    fi
  done
done
grep -q "memory bandwidth 30.0 GB/s (given)" <<<"$out" && ok "given bandwidth used" ||
  bad "given bandwidth not reported: $out"
only=$("$WEFT" bench rows "${tiny[@]}" --rows 2 --dtype bf16 2>&1)
if grep -qE "^bf16 +2( +[0-9]+\.?[0-9]*%?){8} +-$" <<<"$only" && ! grep -q "^fp32 " <<<"$only"; then
  ok "--dtype bf16 measures bf16 only"
else
  bad "--dtype bf16: $only"
fi
# Unless given, the bandwidth is measured between the passes: a row's is its own passes' best.
probed=$("$WEFT" bench rows "${shape[@]}" --rows 1 --dtype fp32 2>&1)
if grep -q "best between the passes" <<<"$probed" &&
  grep -qE "^fp32 +1( +[0-9]+\.?[0-9]*%?){6} +[1-9][0-9]*\.[0-9] +[0-9.]+% +1\.0x$" <<<"$probed"; then
  ok "bandwidth probed between the passes"
else
  bad "no probed bandwidth in: $probed"
fi

once=$("$WEFT" bench bandwidth --seconds 0.01 2>&1)
grep -qE "^memory bandwidth [1-9][0-9]*\.[0-9] GB/s \(triad, best of 0.01 s; [0-9]+ threads\)$" \
  <<<"$once" && ok "bench bandwidth once" || bad "bench bandwidth: $once"
# Three lines in, three figures out, each a positive GB/s alone on its line, nothing else.
each=$(printf '\n\n\n' | "$WEFT" bench bandwidth --seconds 0.01 --each-line 2>&1)
if [ "$(grep -cE "^[1-9][0-9]*\.[0-9]$" <<<"$each")" = 3 ] && [ "$(wc -l <<<"$each")" = 3 ]; then
  ok "bench bandwidth --each-line: one figure a line"
else
  bad "bench bandwidth --each-line: $each"
fi

# weft bench handoff: one line per other CPU, a positive time; on one CPU, a line saying so.
hand=$("$WEFT" bench handoff --passes 200 --runs 3 2>&1)
n_cpus=$(nproc)
if [ "$n_cpus" -lt 2 ] ||
  [ "$(grep -cE "^core handoff [1-9][0-9]* ns \(CPU [0-9]+ to [0-9]+, one way; median of 3 runs of 200 round trips\)$" <<<"$hand")" = $((n_cpus - 1)) ]; then
  ok "bench handoff: a line per other CPU"
else
  bad "bench handoff: $hand"
fi
if command -v taskset >/dev/null; then
  one=$(taskset -c 0 "$WEFT" bench handoff --passes 200 2>&1)
  grep -qx "one CPU (0): no handoff between cores to measure" <<<"$one" &&
    ok "bench handoff on one CPU says so" || bad "bench handoff on one CPU: $one"
fi

expect_error "--passes" "" -- bench handoff --passes 0
expect_error "--runs" "" -- bench handoff --runs 0
expect_error "--seconds" "" -- bench bandwidth --seconds 0
expect_error "--rows" "" -- bench rows "${tiny[@]}" --rows 0
expect_error "--dtype" "" -- bench rows "${tiny[@]}" --dtype fp16
expect_error "--seconds" "" -- bench rows "${tiny[@]}" --seconds 0
expect_error "--bandwidth-gbs" "" -- bench rows "${tiny[@]}" --bandwidth-gbs -1
finish
