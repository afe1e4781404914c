#!/usr/bin/env bash
# weft serve side by side with llama.cpp (docs/serving.md, "Side by side with llama.cpp"): the
# same SmolLM-135M-shaped weights, the same machine and threads, fp32 and bf16.
#   bench/serving_llamacpp.sh <build dir> [threads]      (default 2 threads)
# weft: `weft serve` at batch 1 driven by `weft bench serve` (decode: 8-token prompts, 128
# generated, tokens/s = 1000 / TPOT p50; prompt: 512-token prompts, 1 generated, 512 / TTFT p50).
# llama.cpp: the same checkpoint exported to GGUF (F32 and BF16), timed by llamacpp_speed.mjs
# through node-llama-cpp's prebuilt CPU library. The decode bound is the weights' bytes over the
# memory bandwidth `weft bench rows` measures (as weft profile) in the same run.
set -euo pipefail
BUILD=${1:?build dir} THREADS=${2:-2}
source "$(dirname "$0")/lib.sh"
bench_start "$BUILD"
# node-llama-cpp, pinned, in the cache the tests use.
source "$SRC/tests/node_llama_cpp.sh"
install_node_llama_cpp npm.log
npm_prefix=$cache
echo "load: $(bench_load); $THREADS threads"

# SmolLM-135M's shape and tokenizer, random weights (one training step): speed does not depend on
# what the weights say.
tok=$SRC/tests/data/tokenizers/smollm
"$WEFT" prepare --input "$SRC/data/tinyshakespeare.txt" --out smoldata --tokenizer "$tok" >/dev/null
"$WEFT" train --model smollm-135m --data smoldata/tinyshakespeare_train.bin --out smol --steps 1 \
  --batch-size 1 --seq-len 32 >train.log 2>&1 || { cat train.log; exit 1; }
ckpt=$(ls -d smol/checkpoints/step_* | tail -1)
for t in f32 bf16; do
  "$WEFT" export --ckpt "$ckpt" --format gguf --gguf-type $t --tokenizer "$tok" \
    --out smol_$t.gguf >/dev/null
done
bw=$("$WEFT" bench rows --rows 1 --seconds 0.5 --dtype fp32 2>&1 | grep -o "memory bandwidth [0-9.]*" \
  | awk '{ print $3 }')
params=$(stat -c %s smol_f32.gguf)  # bytes of the f32 file: the weights, 4 bytes each
bound_fp32=$(awk -v bw="$bw" -v b="$params" 'BEGIN { printf "%.1f", bw * 1e9 / b }')
bound_bf16=$(awk -v bw="$bw" -v b="$params" 'BEGIN { printf "%.1f", bw * 2e9 / b }')
echo "memory bandwidth $bw GB/s; decode bound fp32 $bound_fp32 tokens/s, bf16 $bound_bf16 tokens/s"

weft_side() {  # weft_side <dtype>: "decode_tok/s prompt_tok/s" through weft serve
  "$WEFT" serve --ckpt "$ckpt" --tokenizer "$tok" --port 0 --slots 1 --threads "$THREADS" \
    --dtype "$1" --batch-tokens 512 >serve.out 2>serve.err &
  local pid=$! url
  for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
  url=$(grep -o "http://[0-9.:]*/v1" serve.out)
  "$WEFT" bench serve --url "$url" --requests 4 --rate inf --max-concurrency 1 --prompt-len 8 \
    --output-len 128 --json decode.json >/dev/null
  "$WEFT" bench serve --url "$url" --requests 4 --rate inf --max-concurrency 1 --prompt-len 512 \
    --output-len 1 --json prompt.json >/dev/null
  kill $pid
  wait $pid || true
  node -e 'const d = require(process.argv[1]), p = require(process.argv[2]);
    console.log((1000 / d.tpot_ms.median).toFixed(1), (512 / (p.ttft_ms.median / 1000)).toFixed(1))' \
    "$PWD/decode.json" "$PWD/prompt.json"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf "%-5s %-24s %-10s %-10s %-18s %-10s\n" dtype "decode tok/s weft (x)" "of bound" llama.cpp \
  "prompt weft (x)" llama.cpp
for dtype in fp32 bf16; do
  t=f32
  [ $dtype = bf16 ] && t=bf16
  read -r wd wp < <(weft_side $dtype)
  lj=$(node "$SRC/bench/llamacpp_speed.mjs" "$npm_prefix" "$PWD/smol_$t.gguf" 512 128 "$THREADS")
  ld=$(node -p "JSON.parse(process.argv[1]).decode_tokens_per_s.toFixed(1)" "$lj")
  lp=$(node -p "JSON.parse(process.argv[1]).prompt_tokens_per_s.toFixed(1)" "$lj")
  bound=$bound_fp32
  [ $dtype = bf16 ] && bound=$bound_bf16
  printf "%-5s %-24s %-10s %-10s %-18s %-10s\n" $dtype "$wd ($(ratio "$wd" "$ld")x)" \
    "$(awk -v a="$wd" -v b="$bound" 'BEGIN { printf "%.0f%%", 100 * a / b }')" "$ld" \
    "$wp ($(ratio "$wp" "$lp")x)" "$lp"
done
echo "load after: $(bench_load)"
