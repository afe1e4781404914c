# Shared by the CLI tests: bash tests/cli/<name>.sh <weft binary> <source dir>.
set -euo pipefail
WEFT=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# ctest runs two of these tests side by side, two threads each, on the 2 cores: libgomp's default
# spins a waiting thread about 7 ms at every barrier, stealing the core another thread needs
# (as for the unit tests, tests/CMakeLists.txt). cli_offload, load 7-9: 180-220 s -> 85-92 s.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_env.sh"
cd "$WORK"
failures=0
passes=0

ok() { echo "ok: $*"; passes=$((passes + 1)); }
bad() { echo "FAILED: $*"; failures=$((failures + 1)); }

# expect_error "<text the message must contain>" <path that must not appear> -- weft args...
expect_error() {
  local want=$1 untouched=$2
  shift 3
  local out rc=0
  out=$("$WEFT" "$@" 2>&1) || rc=$?
  if [ "$rc" -eq 0 ]; then
    bad "weft $* exited 0; expected an error containing '$want'"
  elif ! grep -qF -- "$want" <<<"$out"; then
    bad "weft $*: message '$out' does not contain '$want'"
  elif [ -n "$untouched" ] && [ -e "$untouched" ]; then
    bad "weft $*: wrote $untouched although it failed"
  elif [ "$(grep -c . <<<"$out")" -gt 3 ]; then
    bad "weft $*: expected one clear error, got: $out"
  else
    ok "weft $* -> exit $rc: $out"
  fi
}

# Prepared tinyshakespeare token files in $WORK/data.
prepare_data() {
  "$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out "$WORK/data" \
    --tokenizer-dir "$SRC/data" >/dev/null
}

# The values of one key of metrics.jsonl lines that have it, one per line.
metric() {
  grep "\"$2\"" "$1" | sed -E "s/.*\"$2\":([^,}]*).*/\1/"
}

source "$SRC/tests/node_llama_cpp.sh"
# Sets $cache to node-llama-cpp's npm prefix, or ends the test as skipped (exit 77) when node or
# npm cannot have it.
need_node_llama_cpp() {
  install_node_llama_cpp "$WORK/npm.log" || { finish; exit 77; }
}

finish() {
  echo "$passes passed, $failures failed"
  [ "$failures" -eq 0 ]
}
