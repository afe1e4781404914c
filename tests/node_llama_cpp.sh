# node-llama-cpp, pinned, in a cache kept between runs (its linux-x64 package holds llama.cpp's
# prebuilt CPU libraries; the CUDA and Vulkan ones are optional dependencies, left out). Sourced
# by the CLI tests (tests/cli/lib.sh) and the benchmarks that compare with llama.cpp.
# install_node_llama_cpp <log file>: sets $cache to its npm prefix; or, when node or npm cannot
# have it, prints "SKIPPED: <why>" and returns 1.
install_node_llama_cpp() {
  local log=$1 version=3.22.1 node_major
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if ! command -v npm >/dev/null || [ "$node_major" -lt 20 ]; then
    echo "SKIPPED: node-llama-cpp@$version needs node >= 20 and npm (node $(node --version 2>/dev/null \
      || echo missing)); llama.cpp not checked"
    return 1
  fi
  cache=${WEFT_NPM_CACHE:-$HOME/.cache/weft/npm}/node-llama-cpp-$version
  if [ ! -e "$cache/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ]; then
    mkdir -p "$cache"
    if ! npm install --prefix "$cache" --no-save --no-audit --no-fund --omit=optional --ignore-scripts \
      --fetch-retries 1 --fetch-timeout 60000 \
      "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >"$log" 2>&1; then
      cat "$log"
      echo "SKIPPED: npm could not install node-llama-cpp@$version (offline?); llama.cpp not checked"
      return 1
    fi
  fi
}
