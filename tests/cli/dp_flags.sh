# Data-parallel flags: each bad value gives one clear error naming it on every layout, a
# non-zero exit, and nothing written; threads per rank default to cores / ranks.
source "$(dirname "$0")/lib.sh"
prepare_data
common=(--data data/tinyshakespeare_train.bin --steps 2 --batch-size 4 --seq-len 32 --peak-gflops 1)

expect_error "--bucket-mb must be positive, got 0" runs/a -- train "${common[@]}" --bucket-mb 0 --out runs/a
expect_error "--comm-timeout must be positive" runs/a -- train "${common[@]}" --comm-timeout -1 --out runs/a
expect_error "--zero must be 0, 1, 2 or 3, got 4" runs/a -- train "${common[@]}" --zero 4 --out runs/a
WEFT_TEST_FAULT=sleep:1 expect_error "WEFT_TEST_FAULT='sleep:1'" runs/a -- train "${common[@]}" --out runs/a

# Under mpirun every rank finds the error; rank 0 names it.
mpi_error() {
  local want=$1
  shift
  local out rc=0
  out=$(OMP_NUM_THREADS=1 mpirun -np 2 "$WEFT" train "${common[@]}" --out runs/m "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$want" <<<"$out" && [ ! -e runs/m ]; then
    ok "mpirun -np 2 weft train $* -> exit $rc: $(grep -F -- "$want" <<<"$out")"
  else
    bad "mpirun -np 2 weft train $* -> exit $rc, expected '$want' and no runs/m: $out"
  fi
}
mpi_error "--batch-size 3 is not divisible by the data-parallel degree 2" --batch-size 3
mpi_error "--batch-size 4 is not a multiple of --micro-batch-size 4 x dp 2 = 8" --micro-batch-size 4
mpi_error "dp*tp*pp*cp = 4*1*1*1 = 4 does not match the world size 2" --dp 4

# Threads per rank: cores / ranks on the node when neither --threads nor OMP_NUM_THREADS says.
cores=$(nproc)
want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
out=$(env -u OMP_NUM_THREADS mpirun -np 2 --bind-to none "$WEFT" train "${common[@]}" --steps 1 --out runs/t 2>&1)
grep -q "$want thread(s) per rank" <<<"$out" && ok "default threads per rank $want of $cores cores" \
  || bad "expected $want thread(s) per rank: $out"
out=$(mpirun -np 2 "$WEFT" train "${common[@]}" --steps 1 --threads 1 --out runs/t1 2>&1)
grep -q "1 thread(s) per rank" <<<"$out" && ok "--threads 1" || bad "--threads 1: $out"
# A lone rank that mpirun binds to one core (its default for up to two ranks) gets one thread,
# and rank 0 says why and how to give it the node; unbound, it takes every core, silently.
if [ "$cores" -gt 1 ]; then
  out=$(env -u OMP_NUM_THREADS mpirun -np 1 "$WEFT" train "${common[@]}" --steps 1 --out runs/b1 2>&1)
  grep -q "1 thread(s) per rank" <<<"$out" &&
    grep -qF "mpirun bound this rank to 1 of the node's $cores cores" <<<"$out" &&
    grep -qF -- "--bind-to none" <<<"$out" && ok "bound lone rank: 1 thread and a note" ||
    bad "bound lone rank: expected 1 thread and the binding note: $out"
  out=$(env -u OMP_NUM_THREADS mpirun -np 1 --bind-to none "$WEFT" train "${common[@]}" --steps 1 --out runs/b2 2>&1)
  grep -q "$cores thread(s) per rank" <<<"$out" && ! grep -q "mpirun bound" <<<"$out" &&
    ok "unbound lone rank: $cores threads, no note" || bad "unbound lone rank: $out"
fi
finish
