# `weft export --format gguf` against llama.cpp itself. Five models are written as GGUF: a briefly
# trained llama-tiny ("plain"), moe-tiny (Mixtral's routing) and GPT-2 tiny, the plain weights
# with q_proj and k_proj multiplied by 20 and Llama 3.1's llama3 rope scaling ("sharp": attention
# scores 400 times larger, so that the rotary layout and its scaling carry much of the loss), and
# a qwen2-tiny sharpened alike ("qsharp", q/k biases included). node-llama-cpp's prebuilt
# llama.cpp library (npm) loads each file and computes the mean next-token loss of 33 validation
# tokens, which must agree with `weft eval` of the checkpoint on the same tokens: F32 within 1e-6
# relative, F16 2e-5 and BF16 1e-4 (rounded weights). Measured on sharp: 3e-8, 3.1e-6, 1.8e-5; a
# file without the q/k rotary permutation is off by 2.6e-4, one without llama3's rope_freqs by
# 4.4e-4, and qsharp permuted as a llama by 4.9e-4. bench/llamacpp_server.mjs (llama.cpp behind
# the completions route) answers `weft bench serve` and a greedy request with weft sample's text.
# Bad flags are one clear error each, before a file is written. The llama.cpp part is skipped (exit 77) only when npm cannot install the
# package (or node is older than its 20); a cached install is used offline.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model llama-tiny --data data/tinyshakespeare_train.bin --out plain --steps 10 \
  --batch-size 4 --seq-len 64 --lr 3e-3 --warmup 2 --peak-gflops 100 >train.log 2>&1 \
  || { cat train.log; exit 1; }

expect_error "--gguf-type 'q4_0' is not a GGUF type weft writes; expected f32, f16 or bf16" x.gguf \
  -- export --ckpt plain --out x.gguf --format gguf --gguf-type q4_0
expect_error "--gguf-type applies to --format gguf only" x -- export --ckpt plain --out x --gguf-type f16
expect_error "--format: gguf2 not in {hf,gguf}" x.gguf -- export --ckpt plain --out x.gguf --format gguf2
expect_error "encoder.json" x.gguf -- export --ckpt plain --out x.gguf --format gguf --tokenizer-dir nowhere

export_gguf() {  # export_gguf <run> <type>: writes <run>-<type>.gguf and checks its header
  "$WEFT" export --ckpt "$1" --out "$1-$2.gguf" --format gguf --gguf-type "$2" \
    --tokenizer-dir "$SRC/data" >/dev/null
  # "GGUF", version 3 (little-endian uint32s).
  local head
  head=$(od -An -tx4 -N8 "$1-$2.gguf" | tr -s ' ')
  [ "$head" = " 46554747 00000003" ] && ok "$1-$2.gguf: GGUF v3, $(stat -c %s "$1-$2.gguf") bytes" \
    || bad "$1-$2.gguf header: $head"
}
export_gguf plain f32

# The first batch weft eval reads (B 1, T 32: tokens 0..32 of the file, after its 1024-byte header).
tokens=$(od -An -tu2 -j1024 -N66 -v data/tinyshakespeare_val.bin | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
weft_loss() {
  "$WEFT" eval --ckpt "$1" --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 32 \
    --batches 1 --json | sed -E 's/.*"loss": *([^,}]*).*/\1/'
}

need_node_llama_cpp

# sharpen <run> <out> [sed expression on config.json]: <run>'s weights through a Hugging Face
# directory, q/k scaled by 20, one step at a negligible learning rate to make them a checkpoint.
sharpen() {
  "$WEFT" export --ckpt "$1" --out "hf-$2" >/dev/null
  node "$SRC/tests/cli/gguf_sharpen.mjs" "hf-$2/model.safetensors" 20
  [ -z "${3:-}" ] || sed -i "$3" "hf-$2/config.json"
  "$WEFT" train --model-dir "hf-$2" --data data/tinyshakespeare_train.bin --out "$2" --steps 1 \
    --batch-size 1 --seq-len 16 --lr 1e-9 --peak-gflops 100 >"$2.log" 2>&1 || { cat "$2.log"; exit 1; }
}
sharpen plain sharp 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}/'
for t in f32 f16 bf16; do export_gguf sharp $t; done
# Qwen2 (llama.cpp's qwen2 architecture: q/k/v biases, no permutation): qwen2-tiny, 3 steps,
# sharpened (its q/k biases too).
"$WEFT" train --model qwen2-tiny --data data/tinyshakespeare_train.bin --out qwen2 --steps 3 \
  --batch-size 2 --seq-len 32 --lr 3e-3 --warmup 1 --peak-gflops 100 >qwen2.log 2>&1 \
  || { cat qwen2.log; exit 1; }
sharpen qwen2 qsharp
export_gguf qsharp f32
# GPT-2 (llama.cpp's gpt2 architecture): the tiny preset, 3 steps.
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out gpt2 --steps 3 \
  --batch-size 2 --seq-len 32 --lr 3e-3 --warmup 1 --peak-gflops 100 >gpt2.log 2>&1 \
  || { cat gpt2.log; exit 1; }
export_gguf gpt2 f32
# Mixtral: moe-tiny (4 experts, top 2), 3 steps.
"$WEFT" train --model moe-tiny --data data/tinyshakespeare_train.bin --out moe --steps 3 \
  --batch-size 2 --seq-len 32 --lr 3e-3 --warmup 1 --peak-gflops 100 >moe.log 2>&1 \
  || { cat moe.log; exit 1; }
export_gguf moe f32

cases=(plain:f32:1e-6 sharp:f32:1e-6 sharp:f16:2e-5 sharp:bf16:1e-4 moe:f32:1e-6 qsharp:f32:1e-6
  gpt2:f32:1e-6)
files=()
for case in "${cases[@]}"; do IFS=: read -r run type tol <<<"$case" && files+=("$run-$type.gguf"); done
# One node process loads every file (the library's start-up once).
if ! NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node "$SRC/tests/cli/gguf_eval.mjs" "$cache" "$tokens" \
  "${files[@]}" >llama.txt 2>&1; then
  bad "llama.cpp: $(cat llama.txt)"
fi
for case in "${cases[@]}"; do
  IFS=: read -r run type tol <<<"$case"
  want=$(weft_loss "$run")
  got=$(grep -F "\"$run-$type.gguf\"" llama.txt | sed -nE 's/.*"loss": *([^,}]*).*/\1/p')
  [ -n "$got" ] || { bad "$run $type: no loss from llama.cpp"; continue; }
  rel=$(awk -v a="$want" -v b="$got" 'BEGIN { d = (a - b) / a; print (d < 0 ? -d : d) }')
  awk -v r="$rel" -v t="$tol" 'BEGIN { exit !(r <= t) }' \
    && ok "$run $type: llama.cpp loss $got, weft $want, relative difference $rel <= $tol" \
    || bad "$run $type: llama.cpp loss $got, weft $want, relative difference $rel > $tol"
done

# bench/llamacpp_server.mjs, the llama.cpp side of bench/serving_llamacpp.sh: llama.cpp behind
# the completions route answers `weft bench serve` (4 streamed requests, 2 at once on its 2 slots)
# and a plain greedy request with weft sample's text.
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node "$SRC/bench/llamacpp_server.mjs" "$cache" "$PWD/plain-f32.gguf" \
  1 2 256 >peer.out 2>peer.err &
peer=$!
trap 'kill -9 $peer 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 300); do grep -q "http://" peer.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*/v1" peer.out) || { bad "llamacpp_server.mjs did not start: $(cat peer.err)"; finish; exit 1; }
"$WEFT" bench serve --url "$url" --requests 4 --rate inf --max-concurrency 2 --prompt-len 8 \
  --output-len 8 --json peer.json >/dev/null
[ "$(jq '[.successful_requests, .total_output_tokens]' -c peer.json)" = "[4,32]" ] \
  && ok "weft bench serve against llama.cpp's side: 4 requests, 32 tokens" \
  || bad "weft bench serve against llamacpp_server.mjs: $(jq -c '{successful_requests, errors}' peer.json)"
want=$("$WEFT" sample --ckpt plain --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 8 --temperature 0)
got=$(curl -s --max-time 30 -d '{"prompt":"ROMEO:","max_tokens":8,"temperature":0}' "$url/completions" | jq -r .choices[0].text)
[ "ROMEO:$got" = "$want" ] && ok "llama.cpp's side greedy: weft sample's text" || bad "llamacpp_server.mjs greedy 'ROMEO:$got' vs '$want'"
kill -TERM $peer
wait $peer && ok "llamacpp_server.mjs: SIGTERM, exit 0" || bad "llamacpp_server.mjs exit $?"
finish
