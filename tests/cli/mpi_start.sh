# weft starts cleanly as a plain process and under mpirun -np 1.
source "$(dirname "$0")/lib.sh"
"$WEFT" --help | grep -q "train" && ok "plain --help" || bad "plain --help"
out=$(mpirun -np 1 "$WEFT" bench peak --size 256 --seconds 0.1 2>&1) && ok "mpirun -np 1: $out" || bad "mpirun -np 1: $out"
out=$("$WEFT" bench peak --size 256 --seconds 0.1 2>&1) && ok "plain: $out" || bad "plain: $out"
for c in train eval sample prepare export bench; do
  "$WEFT" $c --help >/dev/null && ok "$c --help" || bad "$c --help"
done
finish
