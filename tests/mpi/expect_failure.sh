#!/usr/bin/env bash
# expect_failure.sh <bound seconds> <extended regex> <command...>
# Passes when the command exits non-zero within the bound and its output (stdout and stderr
# together, newlines folded to spaces) matches the regex. Prints the output and how long the job
# took after the helper's "stops at" mark, which docs/comm.md quotes.
set -u
bound=$1 pattern=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
timeout $((bound + 30)) "$@" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
# awk, not bc: bc is not on a fresh Debian, and a missing bc would make the bounds unfailable.
calc() { awk "BEGIN { print $1 }"; }
elapsed=$(calc "$end - $start")
mark=$(grep -o 'stops at [0-9.]*' "$out" | head -1 | cut -d' ' -f3)
after=""
if [ -n "$mark" ]; then after=", $(calc "$end - $mark") s after the helper's stop mark"; fi
echo "--- exit code $rc, whole run ${elapsed} s${after}"
fail=0
if [ "$rc" -eq 0 ]; then echo "FAIL: expected a non-zero exit code"; fail=1; fi
if [ "$rc" -eq 124 ] && [ "$(calc "($elapsed > $bound + 29) ? 1 : 0")" -eq 1 ]; then
    echo "FAIL: the job hung and was killed by timeout(1)"; fail=1
fi
if [ "$(calc "($elapsed > $bound) ? 1 : 0")" -eq 1 ]; then
    echo "FAIL: took ${elapsed} s, expected at most ${bound} s"; fail=1
fi
if ! tr '\n' ' ' <"$out" | grep -Eq -- "$pattern"; then
    echo "FAIL: output does not match: $pattern"; fail=1
fi
exit $fail
