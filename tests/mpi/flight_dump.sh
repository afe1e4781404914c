#!/usr/bin/env bash
# flight_dump.sh <flight_helper> timeout|sigterm: the flight recorder's dumps in a 4-rank job
# whose last rank stops before all_reduce #3 on dp (flight_helper.cpp).
#   timeout  --comm-timeout 2: the watchdog ends the job (exit 124); each waiting rank's dump says
#            "timeout" and names all_reduce #3 on dp as blocked; the stopped rank, ended by the
#            abort's SIGTERM, dumps "signal" with 3 finished all-reduces and nothing blocked.
#   sigterm  a long timeout; the script sends SIGTERM to mpirun once the ranks wait: every rank
#            dumps "signal" (the waiting ones naming #3) and mpirun ends non-zero within 10 s.
set -u
helper=$1 case=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_env.sh"
fail=0
start=$(date +%s.%N)
if [ "$case" = timeout ]; then
    timeout 60 mpirun -np 4 "$helper" hang 2 "$dir/flight" >"$dir/out" 2>&1
    rc=$?
    cat "$dir/out"
    [ $rc -eq 124 ] || { echo "FAIL: exit code $rc, expected 124 (the watchdog)"; fail=1; }
    grep -q "flight recorder dumps: $dir/flight/rank_\*.json" "$dir/out" \
        || { echo "FAIL: the watchdog's message does not point at the dumps"; fail=1; }
    reason=timeout
else
    mpirun -np 4 "$helper" stop 60 "$dir/flight" >"$dir/out" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q '^ready' "$dir/out" && break; sleep 0.1; done
    sleep 0.5  # the other waiting ranks are in the all-reduce by now
    kill -TERM $pid
    t0=$(date +%s)
    wait $pid
    rc=$?
    cat "$dir/out"
    [ $rc -ne 0 ] || { echo "FAIL: mpirun exited 0 after SIGTERM"; fail=1; }
    [ $(($(date +%s) - t0)) -le 10 ] || { echo "FAIL: mpirun took over 10 s to stop"; fail=1; }
    reason=signal
fi
echo "--- exit code $rc, $(awk "BEGIN { print $(date +%s.%N) - $start }") s"
ls -l "$dir/flight"
[ -z "$(ls "$dir/flight" | grep -v '^rank_[0-3]\.json$')" ] \
    || { echo "FAIL: stray files (temporaries?) in the dump directory"; fail=1; }
"$helper" check "$dir/flight" 4 $reason 3 1 || fail=1
exit $fail
