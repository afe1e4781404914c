#!/usr/bin/env bash
# weft serve side by side with llama.cpp (docs/serving.md, "Side by side with llama.cpp"): the
# same SmolLM-135M-shaped weights, the same machine and threads, fp32 and bf16.
#   bench/serving_llamacpp.sh <build dir> [threads]      (default 2 threads)
# weft: `weft serve` at batch 1 driven by `weft bench serve` (decode: 8-token prompts, 128
# generated, tokens/s = 1000 / TPOT p50; prompt: 512-token prompts, 1 generated, 512 / TTFT p50).
# llama.cpp: the same checkpoint exported to GGUF (F32 and BF16), timed by llamacpp_speed.mjs
# through node-llama-cpp's prebuilt CPU library. The decode bound is the weights' bytes over the
# memory bandwidth `weft bench rows` measures (as weft profile) in the same run: this host's
# triad moved 34 -> 49 GB/s between two runs a minute apart, so each weft decode run is bracketed
# by a measure before and after, and its share is of the higher of the two (the stricter bound).
# REPS=N (default 1) repeats weft's side N times per dtype and reports the median share.
set -euo pipefail
BUILD=${1:?build dir} THREADS=${2:-2} REPS=${REPS:-1}
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
bandwidth() {
  "$WEFT" bench rows --rows 1 --seconds 0.5 --dtype fp32 2>&1 | grep -o "memory bandwidth [0-9.]*" \
    | awk '{ print $3 }'
}
params=$(stat -c %s smol_f32.gguf)  # bytes of the f32 file: the weights, 4 bytes each

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
  # REPS rounds of (triad, weft's side, triad): the median round by decode share of its bound.
  rounds=()
  for _ in $(seq "$REPS"); do
    b0=$(bandwidth)
    read -r d p < <(weft_side $dtype)
    b1=$(bandwidth)
    rounds+=("$(awk -v d="$d" -v p="$p" -v b0="$b0" -v b1="$b1" -v w="$params" -v dt=$dtype \
      'BEGIN { bw = b0 > b1 ? b0 : b1; bound = bw * (dt == "bf16" ? 2e9 : 1e9) / w;
               printf "%.4f %s %s %.1f %s %s", d / bound, d, p, bound, b0, b1 }')")
  done
  read -r share wd wp bound b0 b1 < <(printf "%s\n" "${rounds[@]}" | sort -n |
    awk '{ r[NR] = $0 } END { print r[int((NR + 1) / 2)] }')
  echo "$dtype triad $b0 / $b1 GB/s around weft's decode: bound $bound tokens/s" >&2
  lj=$(node "$SRC/bench/llamacpp_speed.mjs" "$npm_prefix" "$PWD/smol_$t.gguf" 512 128 "$THREADS")
  ld=$(node -p "JSON.parse(process.argv[1]).decode_tokens_per_s.toFixed(1)" "$lj")
  lp=$(node -p "JSON.parse(process.argv[1]).prompt_tokens_per_s.toFixed(1)" "$lj")
  printf "%-5s %-24s %-10s %-10s %-18s %-10s\n" $dtype "$wd ($(ratio "$wd" "$ld")x)" \
    "$(awk -v s="$share" 'BEGIN { printf "%.0f%%", 100 * s }')" "$ld" \
    "$wp ($(ratio "$wp" "$lp")x)" "$lp"
done
echo "load after: $(bench_load)"
