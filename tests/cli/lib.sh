# Shared by the CLI tests: bash tests/cli/<name>.sh <weft binary> <source dir>.
set -euo pipefail
WEFT=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
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

# node-llama-cpp, pinned, in a cache kept between runs (its linux-x64 package holds llama.cpp's
# prebuilt CPU libraries; the CUDA and Vulkan ones are optional dependencies, left out): sets
# $cache to its npm prefix, or ends the test as skipped (exit 77) when node or npm cannot have it.
need_node_llama_cpp() {
  local version=3.22.1 node_major
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if ! command -v npm >/dev/null || [ "$node_major" -lt 20 ]; then
    echo "SKIPPED: node-llama-cpp@$version needs node >= 20 and npm (node $(node --version 2>/dev/null \
      || echo missing)); llama.cpp not checked"
    finish
    exit 77
  fi
  cache=${WEFT_NPM_CACHE:-$HOME/.cache/weft/npm}/node-llama-cpp-$version
  if [ ! -e "$cache/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ]; then
    mkdir -p "$cache"
    if ! npm install --prefix "$cache" --no-save --no-audit --no-fund --omit=optional --ignore-scripts \
      --fetch-retries 1 --fetch-timeout 60000 \
      "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >"$WORK/npm.log" 2>&1; then
      cat "$WORK/npm.log"
      echo "SKIPPED: npm could not install node-llama-cpp@$version (offline?); llama.cpp not checked"
      finish
      exit 77
    fi
  fi
}

finish() {
  echo "$passes passed, $failures failed"
  [ "$failures" -eq 0 ]
}
