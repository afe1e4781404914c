#!/usr/bin/env bash
# The pipeline trace of ranks bound to cores: pp_bind.sh <weft> <dp_check> <source dir> bound
#   bound   4 stages on 2 cores bound by mpirun (--map-by core --bind-to core:overload-allowed:
#           cores 0 1 0 1): the trace and the metrics record each rank's core, the simulation
#           shares each core among the stages bound to it, and zb-h1's schedule is made from its
#           first step's CPU times; unbound, the same run records no core and pools the 2 cores
set -uo pipefail
WEFT=$1 CHECK=$2 SRC=$3
source "$SRC/tests/mpi/train_lib.sh"
args+=(--n-layer 8 --steps 2 --pp 4 --micro-batch-size 1)

bound() {  # bound <out> args...
  local out=$1
  shift
  mpirun -np 4 --map-by core --bind-to core:overload-allowed "$WEFT" train "${args[@]}" \
    --out "$out" "$@" >"$out.log" 2>&1 || { cat "$out.log"; check false; }
}
trace_line() { grep '"event":"pipeline_trace"' "$1/metrics.jsonl"; }
bound zb --pp-schedule zb-h1 --trace zb.json
trace_line zb
check grep -q '"simulated_per_core":true,"stage_cores":\[0,1,0,1\]' zb/metrics.jsonl
check grep -q '"simulated_cores":2\.0' zb/metrics.jsonl
check grep -q "CPU times on 2 shared cores, each stage on the one it is bound to (0 1 0 1)" zb.log
# By world rank, as the tracks are named.
check grep -q '"rank_cores": *{' zb.json
check [ "$(grep -A5 '"rank_cores"' zb.json | grep -c '"[0-3]": *[01],*$')" -eq 4 ]
# 4 ranks on 2 cores: the first step's costs are CPU times, not wall times that count the
# ranks computing beside each action.
check grep -q '"cpu_times":true,"event":"pipeline_costs"' zb/metrics.jsonl
check grep -q "zb-h1 made for the first step's costs per chunk (F / B+W / W ms of CPU time" zb.log
# Unbound: no core to record, the 2 cores pooled.
mpirun -np 4 --bind-to none "$WEFT" train "${args[@]}" --out free --trace free.json >free.log 2>&1 \
  || { cat free.log; check false; }
trace_line free
check grep -q '"simulated_cores":2\.0,"simulated_per_core":false,"stage_cores":\[-1,-1,-1,-1\]' free/metrics.jsonl
check grep -q '"rank_cores": *{' free.json
finish
