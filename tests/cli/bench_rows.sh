#!/usr/bin/env bash
# weft bench rows on a tiny layer set with the peaks and bandwidth given (measuring them takes
# seconds): a row per dtype and M with its figures, and bad flags refused.
source "$(dirname "$0")/lib.sh"

tiny=(--n-layer 2 --n-embd 64 --kv-dim 32 --hidden 96 --vocab 256 --seconds 0.01
  --bandwidth-gbs 30 --fp32-peak 400 --bf16-peak 800)
out=$("$WEFT" bench rows "${tiny[@]}" --rows 1 5 2>&1)
for dtype in fp32 bf16; do
  for m in 1 5; do
    # dtype, M, seven figures (CPU ms among them), then tokens/s against M = 1's
    want=$([ "$m" = 1 ] && echo "1\.0x" || echo "[0-9]+\.[0-9]x")
    if grep -qE "^$dtype +$m( +[0-9]+\.?[0-9]*%?){7} +$want$" <<<"$out"; then
      ok "$dtype M=$m reported"
    else
      bad "no $dtype M=$m row in: $out"
    fi
  done
done
grep -q "memory bandwidth 30.0 GB/s (given)" <<<"$out" && ok "given bandwidth used" ||
  bad "given bandwidth not reported: $out"
only=$("$WEFT" bench rows "${tiny[@]}" --rows 2 --dtype bf16 2>&1)
if grep -qE "^bf16 +2( +[0-9]+\.?[0-9]*%?){7} +-$" <<<"$only" && ! grep -q "^fp32 " <<<"$only"; then
  ok "--dtype bf16 measures bf16 only"
else
  bad "--dtype bf16: $only"
fi

expect_error "--rows" "" -- bench rows "${tiny[@]}" --rows 0
expect_error "--dtype" "" -- bench rows "${tiny[@]}" --dtype fp16
expect_error "--seconds" "" -- bench rows "${tiny[@]}" --seconds 0
expect_error "--bandwidth-gbs" "" -- bench rows "${tiny[@]}" --bandwidth-gbs -1
finish
