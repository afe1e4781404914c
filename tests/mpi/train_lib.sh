# Shared by dp_train.sh, pp_train.sh and tp_train.sh (sourced, not a test): a scratch directory
# with the tokenised corpus, and the helpers that run `weft train` under mpirun and compare runs.
# The sourcing script sets WEFT, CHECK and SRC first, and may add to `args` after sourcing.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_env.sh"
unset OMP_NUM_THREADS
failures=0
check() { "$@" || { echo "FAILED: $*"; failures=$((failures + 1)); }; }

"$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out data --tokenizer-dir "$SRC/data" >/dev/null
# One validation batch: the evaluation still runs on every layout, at an eighth of the default's
# cost (at --seq-len 256 the default 8 batches took longer than the training steps).
args=(--model "${MODEL:-tiny}" --data data/tinyshakespeare_train.bin --batch-size 8 --seq-len 32 --lr 1e-3
      --warmup 2 --peak-gflops 100 --threads 1 --eval-batches 1)

train() {  # train <np> <out> args...: rank 0's output in <out>.log
  local np=$1 out=$2
  shift 2
  mpirun -np "$np" "$WEFT" train "${args[@]}" --out "$out" "$@" >"$out.log" 2>&1 \
    || { echo "FAILED: mpirun -np $np weft train $* (see below)"; cat "$out.log"; failures=$((failures + 1)); }
}
ckpt() { echo "$1/checkpoints/step_$(printf %06d "$2")"; }
same_as_ref() {  # same_as_ref <run> <ref> [step] [tol] [wtol]: losses within tol (1e-5), weights wtol (1e-4)
  local step=${3:-5}
  check "$CHECK" losses "$2" "$1" "${4:-1e-5}"
  check "$CHECK" weights "$(ckpt "$2" "$step")" "$(ckpt "$1" "$step")" "${5:-1e-4}"
}
expect_error() {  # expect_error <np> <message> args...: non-zero exit, the message, nothing written
  local np=$1 msg=$2
  shift 2
  out=$(mpirun -np "$np" "$WEFT" train "${args[@]}" --steps 2 --out runs/x "$@" 2>&1)
  rc=$?
  echo "$out" | grep -F "error" | head -2
  check [ $rc -ne 0 ]
  check grep -qF -- "$msg" <<<"$out"
  check [ ! -e runs/x ]
}
finish() {
  echo "$failures failed"
  [ "$failures" -eq 0 ]
}
