# `weft export --format gguf` against llama.cpp itself: a briefly trained llama-tiny is written as
# GGUF in F32, F16 and BF16, node-llama-cpp's prebuilt llama.cpp library (npm) loads each file and
# computes the mean next-token loss of 33 validation tokens, and `weft eval` of the checkpoint on
# the same tokens must agree: F32 within 1e-6 relative, F16 5e-6 and BF16 (rounded weights) 1e-4
# (measured 5e-8, 2.3e-7 and 1.9e-5). Without the rotary permutation of q/k the F32 and F16 files
# are off by 1.7e-5 and 1.8e-5 on this briefly trained model, which the tolerances catch. Bad
# flags are one clear error each, before a file is written. The llama.cpp part is skipped (exit
# 77) only when npm cannot install the package (or node is older than its 20); a cached install
# is used offline.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model llama-tiny --data data/tinyshakespeare_train.bin --out run --steps 10 \
  --batch-size 4 --seq-len 64 --lr 3e-3 --warmup 2 --peak-gflops 100 >train.log 2>&1 \
  || { cat train.log; exit 1; }

expect_error "--gguf-type 'q4_0' is not a GGUF type weft writes; expected f32, f16 or bf16" x.gguf \
  -- export --ckpt run --out x.gguf --format gguf --gguf-type q4_0
expect_error "--gguf-type applies to --format gguf only" x -- export --ckpt run --out x --gguf-type f16
expect_error "--format: gguf2 not in {hf,gguf}" x.gguf -- export --ckpt run --out x.gguf --format gguf2
expect_error "encoder.json" x.gguf -- export --ckpt run --out x.gguf --format gguf --tokenizer-dir nowhere
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out gpt2run --steps 1 \
  --batch-size 1 --seq-len 16 --peak-gflops 100 >/dev/null 2>&1
expect_error "this model's family is gpt2" x.gguf \
  -- export --ckpt gpt2run --out x.gguf --format gguf --tokenizer-dir "$SRC/data"

for t in f32 f16 bf16; do
  "$WEFT" export --ckpt run --out "m-$t.gguf" --format gguf --gguf-type "$t" --tokenizer-dir "$SRC/data" \
    >/dev/null
  # "GGUF", version 3 (little-endian uint32s).
  head=$(od -An -tx4 -N8 "m-$t.gguf" | tr -s ' ')
  [ "$head" = " 46554747 00000003" ] && ok "m-$t.gguf: GGUF v3, $(stat -c %s "m-$t.gguf") bytes" \
    || bad "m-$t.gguf header: $head"
done

# The first batch weft eval reads (B 1, T 32: tokens 0..32 of the file, after its 1024-byte header).
tokens=$(od -An -tu2 -j1024 -N66 -v data/tinyshakespeare_val.bin | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
weft_loss=$("$WEFT" eval --ckpt run --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 32 \
  --batches 1 --json | sed -E 's/.*"loss": *([^,}]*).*/\1/')
echo "weft eval: $weft_loss on tokens $tokens"

# node-llama-cpp, pinned, in a cache kept between runs; its linux-x64 package holds llama.cpp's
# prebuilt CPU libraries (the CUDA and Vulkan ones are optional dependencies, left out).
version=3.22.1
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
for t in f32:1e-6 f16:5e-6 bf16:1e-4; do
  type=${t%%:*} tol=${t#*:}
  out=$(NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node "$SRC/tests/cli/gguf_eval.mjs" "$cache" "m-$type.gguf" \
    "$tokens" 2>&1) || { bad "llama.cpp on m-$type.gguf: $out"; continue; }
  cpp_loss=$(sed -nE 's/.*"loss": *([^,}]*).*/\1/p' <<<"$out")
  rel=$(awk -v a="$weft_loss" -v b="$cpp_loss" 'BEGIN { d = (a - b) / a; print (d < 0 ? -d : d) }')
  awk -v r="$rel" -v t="$tol" 'BEGIN { exit !(r <= t) }' \
    && ok "$type: llama.cpp loss $cpp_loss, weft $weft_loss, relative difference $rel <= $tol" \
    || bad "$type: llama.cpp loss $cpp_loss, weft $weft_loss, relative difference $rel > $tol"
done
finish
