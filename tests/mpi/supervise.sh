#!/usr/bin/env bash
# The supervisor end to end (docs/supervisor.md): supervise.sh <weft> <source dir> <mode>
#   kill       a rank killed (SIGKILL) three ways: by WEFT_TEST_FAULT=kill at a random step, by
#              this script after a random short sleep (pid from its heartbeat), and in the
#              middle of a checkpoint; each time the run restarts, finishes, and its final
#              checkpoint is byte-identical (diff -r) to an uninterrupted run of the same layout.
#              The supervisor must see each kill within 10 s; the time from the kill to the first
#              new step is printed (docs/supervisor.md quotes it).
#   hang       WEFT_TEST_FAULT=hang: a report naming the hang and rank 1, then a restart; and a
#              hang of a single process, seen by its heartbeat alone
#   nan        WEFT_TEST_FAULT=nan: a report naming the non-finite loss and rank 1, then a restart
#   elastic    --elastic: rank 1 of `mpirun -np 4 ... --dp 4 --batch-size 8` killed at step 3;
#              the restart runs on the ranks left with dp 2 (8 does not split over 3) and twice
#              the gradient accumulation; its losses and final weights match an uninterrupted
#              dp 4 run (dp_check), and the report records the re-plan
#   exhausted  --max-restarts 0 and a fault: non-zero exit naming the fault, no restart
#   orphans    weft run SIGKILLed while `mpirun -np 1 <a sleep>` runs: mpirun and its rank are
#              gone within 10 s (the kernel sends mpirun SIGTERM when its parent dies)
#   errors     no command, no --out, a negative --max-restarts, a program (or the program of
#              mpirun) that cannot start: one clear error each, no files;
#              bad input to the train command: its error, no restart, no files
#              (and --elastic's: no launcher rank count, --min-ranks above the world)
# SUPERVISE_SEED=<n> repeats the random choices of a failed run (the seed is printed).
set -uo pipefail
WEFT=$1 SRC=$2 MODE=$3 DP_CHECK=${4:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_env.sh"
unset OMP_NUM_THREADS WEFT_TEST_FAULT WEFT_ATTEMPT
failures=0
check() { "$@" || { echo "FAILED: $*"; failures=$((failures + 1)); }; }
calc() { awk "BEGIN { print $1 }"; }  # awk, not bc: bc is not on a fresh Debian
now() { date +%s.%N; }
seed=${SUPERVISE_SEED:-$$}
RANDOM=$seed
echo "seed $seed (SUPERVISE_SEED=$seed repeats this run's random choices)"

"$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out data --tokenizer-dir "$SRC/data" >/dev/null
STEPS=5
args=(--model tiny --data data/tinyshakespeare_train.bin --steps $STEPS --batch-size 4 --seq-len 32
      --lr 1e-3 --warmup 2 --peak-gflops 100 --threads 1 --save-every 1)
train_cmd() { echo mpirun -np 2 "$WEFT" train "${args[@]}" --out "$1"; }

# A field of a one-line JSON file (heartbeats, fault reports: numbers and plain strings).
field() { grep -o "\"$2\": *[^,}]*" "$1" 2>/dev/null | head -1 | sed -E 's/^[^:]*: *//; s/"//g'; }
# The same of a heartbeat, which is briefly absent while a rank replaces it.
beat_field() {
  local v="" i
  for i in $(seq 200); do v=$(field "$1" "$2"); [ -n "$v" ] && break; sleep 0.005; done
  echo "$v"
}

# supervised <run> [weft run flags...]: runs `weft run` in the background; output in <run>.log.
supervised() {
  local run=$1
  shift
  "$WEFT" run --grace 3 "$@" -- $(train_cmd "$run") >"$run.log" 2>&1 &
  sup_pid=$!
}
# wait_supervised <run>: waits for it (at most 120 s) and sets rc.
wait_supervised() {
  local i
  for i in $(seq 1200); do kill -0 $sup_pid 2>/dev/null || break; sleep 0.1; done
  kill -0 $sup_pid 2>/dev/null && { echo "FAILED: weft run still running after 120 s"; kill $sup_pid; }
  wait $sup_pid
  rc=$?
}
same_final() {  # same_final <run>: the run finished and its last checkpoint is that of ref
  check [ "$rc" -eq 0 ]
  check grep -q "the run finished on attempt 1" "$1.log"
  # Each step logged once, though the restart redid those after its checkpoint.
  check [ "$(grep '"loss"' "$1/metrics.jsonl" | grep -o '"step":[0-9]*' | sort -u | wc -l)" -eq $STEPS ]
  check [ "$(grep -c '"loss"' "$1/metrics.jsonl")" -eq $STEPS ]
  if diff -r "ref/checkpoints/step_$(printf %06d $STEPS)" "$1/checkpoints/step_$(printf %06d $STEPS)"; then
    echo "$1: final checkpoint byte-identical to the uninterrupted run"
  else
    echo "FAILED: $1: final checkpoint differs from the uninterrupted run"; failures=$((failures + 1))
    tail -20 "$1.log"
  fi
}
# report_times <run> <kill unix time>: bounds the detection latency, prints the recovery time.
report_times() {
  local report=$1/faults/attempt_0.json killed=$2
  local detected first
  detected=$(field "$report" detected_at)
  first=$(field "$report" first_step_at)
  if [ -z "$detected" ] || [ -z "$first" ]; then
    echo "FAILED: $report lacks detected_at or recovery"; failures=$((failures + 1)); cat "$report"; return
  fi
  local latency recover
  latency=$(calc "$detected - $killed")
  recover=$(calc "$first - $killed")
  echo "$1: kill -> detected $latency s, kill -> first new step finished $recover s"
  check [ "$(calc "($latency < 10 && $latency > -0.5) ? 1 : 0")" -eq 1 ]
}

case $MODE in
kill)
  eval "$(train_cmd ref)" >ref.log 2>&1 || { echo "FAILED: reference run"; cat ref.log; exit 1; }

  # 1. The rank kills itself at a random step.
  step=$((2 + RANDOM % (STEPS - 1)))
  rank=$((RANDOM % 2))
  echo "--- WEFT_TEST_FAULT=kill:$rank:$step"
  WEFT_TEST_FAULT=kill:$rank:$step supervised fault --max-restarts 2
  wait_supervised
  same_final fault
  check grep -q '"cause": "exit"' fault/faults/attempt_0.json
  check grep -qE "attempt 0: rank $rank ended" fault.log
  mark=$(grep -o 'stops at [0-9.]*' fault.log | head -1 | cut -d' ' -f3)
  report_times fault "$mark"

  # 2. This script kills a rank at whatever it is doing a random short time after its heartbeat
  # reaches a random step (a time after the first beat alone outlived the whole run once saves
  # went past the page cache: the five steps and saves take well under a second).
  rank=$((RANDOM % 2))
  at=$((1 + RANDOM % (STEPS - 2)))
  delay=$(calc "($RANDOM % 100) / 1000")
  echo "--- kill -9 of rank $rank's pid $delay s after its heartbeat reaches step $at"
  supervised pid --max-restarts 2
  for i in $(seq 6000); do
    s=$(field pid/heartbeat/rank_$rank.json step)
    [ -n "$s" ] && [ "$s" -ge "$at" ] && break
    sleep 0.005
  done
  sleep "$delay"
  victim=$(beat_field pid/heartbeat/rank_$rank.json pid)
  phase=$(beat_field pid/heartbeat/rank_$rank.json phase)
  killed=$(now)
  kill -9 "$victim"
  echo "killed pid $victim (rank $rank, phase $phase)"
  [ "$phase" = done ] && { echo "FAILED: the run finished before the kill"; failures=$((failures + 1)); }
  wait_supervised
  same_final pid
  check grep -qE "attempt 0: rank $rank ended" pid.log
  report_times pid "$killed"

  # 3. Rank 0 (it writes the checkpoint) killed as soon as its heartbeat says it is saving one.
  target=$((2 + RANDOM % (STEPS - 2)))
  echo "--- kill -9 of rank 0 in the checkpoint of step $target"
  supervised ckpt --max-restarts 2
  for i in $(seq 6000); do
    [ "$(field ckpt/heartbeat/rank_0.json phase)" = checkpoint ] &&
      [ "$(beat_field ckpt/heartbeat/rank_0.json step)" = "$target" ] && break
    sleep 0.005
  done
  victim=$(beat_field ckpt/heartbeat/rank_0.json pid)
  killed=$(now)
  kill -9 "$victim"
  partial=$(ls -a ckpt/checkpoints | grep -c '^\.tmp-' || true)
  echo "killed pid $victim in its checkpoint; partial checkpoint directories left: $partial"
  wait_supervised
  same_final ckpt
  report_times ckpt "$killed"
  ;;
hang)
  # Rank 1 sleeps at step 3; the comm watchdog (2 s) ends the job; the supervisor restarts it.
  WEFT_TEST_FAULT=hang:1:3 supervised hang --max-restarts 1 --comm-timeout 2
  wait_supervised
  cat hang.log | grep "^weft run"
  check [ "$rc" -eq 0 ]
  check grep -q '"cause": "hang"' hang/faults/attempt_0.json
  check grep -qE 'attempt 0: hang: .*naming rank 1' hang.log
  check grep -q "the run finished on attempt 1" hang.log
  # One process, no communication to time out: only the heartbeats show the hang; the
  # supervisor ends it (SIGTERM) and restarts it.
  WEFT_TEST_FAULT=hang:0:3 "$WEFT" run --grace 3 --heartbeat-timeout 2 -- \
    "$WEFT" train "${args[@]}" --out hang1 >hang1.log 2>&1
  rc=$?
  grep "^weft run" hang1.log
  check [ "$rc" -eq 0 ]
  check grep -q '"cause": "hang"' hang1/faults/attempt_0.json
  check grep -q '"command_exit_code": null' hang1/faults/attempt_0.json
  check grep -qE 'attempt 0: hang: no heartbeat progress for 2.0 s from rank 0' hang1.log
  check grep -q "the run finished on attempt 1" hang1.log
  ;;
nan)
  WEFT_TEST_FAULT=nan:1:3 supervised nan --max-restarts 1
  wait_supervised
  grep "^weft run" nan.log
  check [ "$rc" -eq 0 ]
  check grep -q '"cause": "nonfinite"' nan/faults/attempt_0.json
  check grep -qE 'attempt 0: non-finite loss on rank 1; rank 1: loss nan at step 3' nan.log
  check grep -q "the run finished on attempt 1" nan.log
  ;;
elastic)
  # Tolerances: dp 2 with two micro-batches sums the same samples as dp 4 in another order.
  dp4() { echo mpirun -np 4 "$WEFT" train "${args[@]}" --batch-size 8 --dp 4 --out "$1"; }
  eval "$(dp4 ref)" >ref.log 2>&1 || { echo "FAILED: reference run"; cat ref.log; exit 1; }
  WEFT_TEST_FAULT=kill:1:3 "$WEFT" run --grace 3 --elastic --max-restarts 1 -- $(dp4 el) >el.log 2>&1
  rc=$?
  grep "^weft run" el.log
  check [ "$rc" -eq 0 ]
  check grep -q "the run finished on attempt 1" el.log
  check grep -qF "elastic: world 4 -> 2 (3 rank(s) left), dp 4 -> 2, gradient accumulation 1 -> 2" el.log
  check grep -qE "^weft run: attempt 1: mpirun -np 2 .* --dp 2 --micro-batch-size 2 --resume$" el.log
  report=el/faults/attempt_0.json
  for kv in old_world:4 ranks_left:3 new_world:2 old_dp:4 new_dp:2 old_accumulation:1 new_accumulation:2; do
    check [ "$(field $report ${kv%%:*})" = "${kv#*:}" ]
  done
  # The steps after the restart (metrics.jsonl is appended to: the last start line begins them)
  # against the same steps of the uninterrupted run.
  mkdir -p after refafter
  awk '/"event": *"start"/ { n = NR } { line[NR] = $0 } END { for (i = n + 1; i <= NR; i++) print line[i] }' \
    el/metrics.jsonl >after/metrics.jsonl
  first=$(grep -o '"step": *[0-9]*' after/metrics.jsonl | head -1 | grep -o '[0-9]*$')
  echo "resumed at step $first"
  check [ -n "$first" ]
  awk -v first="${first:-1}" 'match($0, /"step": *[0-9]+/) { s = substr($0, RSTART, RLENGTH); sub(/.*: */, "", s); if (s + 0 >= first) print }' \
    ref/metrics.jsonl >refafter/metrics.jsonl
  check "$DP_CHECK" losses refafter after 1e-5
  last=step_$(printf %06d $STEPS)
  check "$DP_CHECK" weights "ref/checkpoints/$last" "el/checkpoints/$last" 1e-4
  ;;
exhausted)
  WEFT_TEST_FAULT=exit:1:2 supervised out --max-restarts 0
  wait_supervised
  grep "^weft run" out.log
  check [ "$rc" -ne 0 ]
  check grep -qE "weft run: failed: rank 1 ended|weft run: failed: the command ended \(exit code 1\)" out.log
  check grep -q "giving up: 0 restart(s) used of --max-restarts 0" out.log
  check [ "$(grep -c '^weft run: attempt [0-9]*: mpirun' out.log)" -eq 1 ]
  ;;
orphans)
  # A state that is not Z or X, from /proc/<pid>/stat ("pid (comm) state ...").
  alive() { [ -n "$1" ] && sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null | grep -qv '[ZX]'; }
  gone() { ! alive "$1"; }
  "$WEFT" run -- mpirun -np 1 sh -c 'echo $$ $PPID >pids; exec sleep 1000' --out orphan \
    >orphan.log 2>&1 &
  sup_pid=$!
  for i in $(seq 200); do [ -s pids ] && break; sleep 0.05; done
  read -r rank launcher <pids || true
  kill -9 $sup_pid
  for i in $(seq 100); do alive "$rank" || alive "$launcher" || break; sleep 0.1; done
  echo "after weft run's SIGKILL (waited $(calc "($i - 1) / 10") s): rank $rank $(alive "$rank" && echo alive || echo gone), mpirun $launcher $(alive "$launcher" && echo alive || echo gone)"
  check [ -n "$rank" ]
  check gone "$rank"
  check gone "$launcher"
  kill -9 "$launcher" "$rank" 2>/dev/null  # if it failed, not left running
  ;;
errors)
  expect() {  # expect <message> weft run args...: non-zero, the message, one line, no run dir
    local want=$1 out rc=0
    shift
    out=$("$WEFT" run "$@" 2>&1) || rc=$?
    echo "weft run $* -> exit $rc: $out"
    check [ "$rc" -ne 0 ]
    check grep -qF -- "$want" <<<"$out"
    check [ "$(grep -c . <<<"$out")" -eq 1 ]
    check [ ! -e runs ]
  }
  expect "weft run: no command to supervise"
  expect "weft run: no command to supervise" --max-restarts 2 --
  expect "has no --out" -- "$WEFT" train "${args[@]}"
  expect "weft run --max-restarts -1: expected a whole number >= 0" --max-restarts -1 -- \
    "$WEFT" train --out runs/x
  expect "weft run --comm-timeout 5 but the command says --comm-timeout 3" --comm-timeout 5 -- \
    "$WEFT" train --out runs/x --comm-timeout 3
  expect "weft run: cannot run 'no-such-launcher': no such program" -- no-such-launcher --out runs/x
  expect "weft run: cannot run '/no/such/program', the program of \`mpirun -np 2 /no/such/program\`: no such file" \
    -- mpirun -np 2 /no/such/program --out runs/x
  expect "weft run: cannot run '/', the program of \`mpirun -np 2 --mca btl self,vader /\`: a directory" \
    -- mpirun -np 2 --mca btl self,vader / --out runs/x
  expect "weft run --elastic: the command '$WEFT train --out runs/x' has no launcher rank count" \
    --elastic -- "$WEFT" train --out runs/x
  expect "weft run --min-ranks 5: larger than the command's world of 4 rank(s)" --elastic \
    --min-ranks 5 -- mpirun -np 4 "$WEFT" train --out runs/x
  expect "weft run --min-ranks 2 without --elastic" --min-ranks 2 -- \
    mpirun -np 4 "$WEFT" train --out runs/x
  # not_restarted <exit code> <message> <attempt line pattern> -- <command...>: the command's
  # own error, one attempt, no restart, nothing written.
  not_restarted() {
    local code=$1 want=$2 attempt=$3 out rc
    shift 4
    out=$("$WEFT" run -- "$@" 2>&1)
    rc=$?
    echo "$out"
    check [ "$rc" -eq "$code" ]
    check grep -qF -- "$want" <<<"$out"
    check grep -qF "not restarting: the command failed before training started" <<<"$out"
    check [ "$(grep -c "^weft run: attempt [0-9]*: $attempt" <<<"$out")" -eq 1 ]
    check [ ! -e runs ]
  }
  # A launch that never started, past the check before it (an option it does not know may take
  # the next word): mpirun's own error (exit 132).
  not_restarted 132 "mpirun was unable to launch the specified application" mpirun -- \
    mpirun -np 2 --show-progress /no/such/program --out runs/x
  # Bad input to the train command.
  not_restarted 1 "cannot open token file 'no-such.bin'" '.*weft train --data' -- \
    "$WEFT" train --data no-such.bin --out runs/x
  ;;
*)
  echo "unknown mode $MODE"
  exit 2
  ;;
esac
echo "$failures failed"
[ "$failures" -eq 0 ]
