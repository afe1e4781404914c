#!/usr/bin/env bash
# How a placement of the two cores changes the products (docs/serving.md, "Two core complexes:
# the cores are not slower, the crossing is"). This host's two vCPUs move between sharing a core
# complex and sitting on two, from one few seconds to the next; `weft bench handoff` tells which
# (about 30-80 ns one way on one, 150-180 on two). Each round takes the handoff, then the 135M
# model's bf16 products at 64 rows on each core alone (one thread, taskset) and on both, 16 rows
# and one row on both, then the handoff again; a round whose two handoffs agree on the placement
# is printed under it, and the medians of each placement close the run.
#   bench/two_cores.sh <build dir> [rounds]      (default 30 rounds, about 4 s each)
set -euo pipefail
WEFT=$(realpath "${1:?build dir}/weft")
ROUNDS=${2:-30}
rows() {  # rows <threads> <M> [cpu]: ms a pass of the products at M rows
  local pin=()
  [ -n "${3:-}" ] && pin=(taskset -c "$3")
  OMP_NUM_THREADS=$1 "${pin[@]}" "$WEFT" bench rows --rows "$2" --dtype bf16 --seconds 0.3 \
    --bandwidth-gbs 40 --bf16-peak 450 --fp32-peak 228 | awk '$1 == "bf16" { print $3 }'
}
handoff() { "$WEFT" bench handoff --passes 2000 --runs 1 | awk '{ print $3 }'; }
echo "round placement handoff(ns) | M64 cpu0 cpu1 both | M16 both | M1 both (ms a pass)"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$ROUNDS"); do
  h1=$(handoff)
  a=$(rows 1 64 0) b=$(rows 1 64 1) c=$(rows 2 64) d=$(rows 2 16) e=$(rows 2 1)
  h2=$(handoff)
  where=mixed
  [ "$h1" -lt 100 ] && [ "$h2" -lt 100 ] && where=one
  [ "$h1" -gt 140 ] && [ "$h2" -gt 140 ] && where=two
  echo "$r $where $h1/$h2 | $a $b $c | $d | $e" | tee -a "$results"
done
for where in one two; do
  awk -v w="$where" '
    $2 == w { n++; for (i = 0; i < 5; i++) v[i, n] = $(5 + i + (i > 2) + (i > 3)) }
    function median(i,   k, j, t, a) {
      for (k = 1; k <= n; k++) a[k] = v[i, k]
      for (k = 2; k <= n; k++) for (j = k; j > 1 && a[j - 1] > a[j]; j--) {
        t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      if (!n) { printf "%s complex(es): no round\n", w; exit }
      printf "%s complex(es), %d rounds, medians: M64 cpu0 %.2f cpu1 %.2f both %.2f | M16 both %.2f | M1 both %.2f\n",
        w, n, median(0), median(1), median(2), median(3), median(4)
    }' "$results"
done
