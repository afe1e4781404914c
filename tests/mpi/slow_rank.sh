#!/usr/bin/env bash
# slow_rank.sh <weft> <dp_check> <source dir> named|none|errors: slow-rank diagnosis through
# `weft train` on 2 ranks, tiny model, 8 steps (7 compared: the first is warm-up).
#   named   --inject-delay 1:150: one slow_rank event naming rank 1, late in at least 5 of the 7
#           steps by a median within [100, 450] ms of the injected 150 ms, and a progress note
#   none    no injection: no slow_rank event
#   errors  bad --inject-delay values: one clear error each, nothing written
set -u
WEFT=$1 CHECK=$2 SRC=$3
source "$SRC/tests/mpi/train_lib.sh"
awk_num() { grep -o "\"$1\":[-0-9.e]*" | head -1 | cut -d: -f2; }
start=$(date +%s.%N)
case $4 in
named)
    train 2 slow --steps 8 --inject-delay 1:150
    ev=$(grep '"event":"slow_rank"' slow/metrics.jsonl)
    echo "$ev"
    check [ "$(grep -c '"event":"slow_rank"' slow/metrics.jsonl)" -eq 1 ]
    check [ "$(echo "$ev" | awk_num rank)" = 1 ]
    check [ "$(echo "$ev" | awk_num steps)" = 7 ]
    late=$(echo "$ev" | awk_num steps_late) lateness=$(echo "$ev" | awk_num median_lateness_s)
    check [ "${late:-0}" -ge 5 ]
    check awk "BEGIN { exit !($lateness >= 0.1 && $lateness <= 0.45) }"
    check grep -q "slow rank: rank 1 (dp 1) arrived last" slow.log
    ;;
none)
    train 2 fair --steps 8
    grep '"event":"slow_rank"' fair/metrics.jsonl
    check [ "$(grep -c '"event":"slow_rank"' fair/metrics.jsonl)" -eq 0 ]
    check [ "$(grep -c '"loss"' fair/metrics.jsonl)" -eq 8 ]
    check bash -c "! grep -q 'slow rank' fair.log"
    ;;
errors)
    expect_error 2 "--inject-delay '2:150': expected RANK:MS with RANK 0..1" --inject-delay 2:150
    expect_error 2 "--inject-delay '1:-5': expected RANK:MS" --inject-delay 1:-5
    expect_error 1 "--inject-delay 'slow': expected RANK:MS" --inject-delay slow
    expect_error 1 "--inject-delay '1:150ms': expected RANK:MS" --inject-delay 1:150ms
    ;;
*) echo "unknown case $4"; exit 2 ;;
esac
echo "--- $4: $(awk "BEGIN { print $(date +%s.%N) - $start }") s"
finish
