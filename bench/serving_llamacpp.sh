#!/usr/bin/env bash
# weft serve side by side with llama.cpp (docs/serving.md, "Side by side with llama.cpp"): the
# same SmolLM-135M-shaped weights, the same machine and threads, fp32 and bf16.
#   bench/serving_llamacpp.sh <build dir> [threads]      (default 2 threads)
# Then 16 concurrent clients against 1 on one weft serve --slots 16, each dtype. Last, the same
# client (`weft bench serve`) against llama.cpp behind the completions route (llamacpp_server.mjs:
# one slot for decode and prompts, 16 for the clients), beside weft serve's figures above.
# weft: `weft serve` at batch 1 driven by `weft bench serve` (decode: 8-token prompts, 128
# generated, tokens/s = 1000 / TPOT p50; prompt: 512-token prompts, 1 generated, 512 / TTFT p50).
# llama.cpp: the same checkpoint exported to GGUF (F32 and BF16), timed by llamacpp_speed.mjs
# through node-llama-cpp's prebuilt CPU library. The decode bound is the weights' bytes over the
# memory bandwidth (the triad of `weft bench rows`, as weft profile). This host's bandwidth moves
# between about 33 and 59 GB/s from one few seconds to the next (other tenants), so the bound and
# the decode are taken in the same window, as weft takes a peak: REPS rounds (default 8) of one
# bandwidth probe then one 128-token decode request, alternated; the bound is of the best probe,
# the decode the best request's (1000 / its TPOT), and the medians of both are printed too. Each
# round's request also has a probe after it: where the two agree within 10%, the round's decode
# is printed as a share of the bound at their mean (the window it ran in), and their median.
set -euo pipefail
BUILD=${1:?build dir} THREADS=${2:-2} REPS=${REPS:-8}
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
# One bandwidth probe, GB/s: the best of about 0.3 s of the triad (`weft bench bandwidth`, as
# weft profile and weft bench rows take it), from one process that keeps its buffers. A process a
# probe allocated and freed 768 MB each time, and this VM reports freed memory to its host about
# 1.5 s later, which slowed the decode request then running by about 8% every other round.
coproc PROBE { "$WEFT" bench bandwidth --seconds 0.3 --each-line; }
bandwidth() {
  local b
  echo >&"${PROBE[1]}"
  read -r b <&"${PROBE[0]}"
  echo "$b"
}
params=$(stat -c %s smol_f32.gguf)  # bytes of the f32 file: the weights, 4 bytes each

# Tokens/s from `weft bench serve --json`: decode 1000 / TPOT p50, prompt 512 / TTFT p50.
decode_speed() { node -p "(1000 / require('$PWD/$1').tpot_ms.median).toFixed(1)"; }
prompt_speed() { node -p "(512000 / require('$PWD/$1').ttft_ms.median).toFixed(1)"; }
# "best median" of numbers, one a line.
best_median() {
  sort -g | awk '{ v[NR] = $1 } END { printf "%s %.1f\n", v[NR], (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }'
}
# The median of numbers, one a line, to 3 decimals (nothing for none).
median3() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }'
}
# The decode bound in tokens/s at a bandwidth: the weights read once a token, 4 or 2 bytes each.
bound() {  # bound <GB/s> <dtype>
  awk -v b="$1" -v w="$params" -v dt="$2" 'BEGIN { printf "%.1f", b * (dt == "bf16" ? 2e9 : 1e9) / w }'
}

# start_server <dtype> [flags...]: a weft serve on a free loopback port, in the background;
# sets server_pid and server_url (its /v1) once it has printed its start line.
start_server() {
  local dtype=$1
  shift
  "$WEFT" serve --ckpt "$ckpt" --tokenizer "$tok" --port 0 --threads "$THREADS" --dtype "$dtype" \
    "$@" >serve.out 2>serve.err &
  server_pid=$!
  for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
  server_url=$(grep -o "http://[0-9.:]*/v1" serve.out)
}

# weft_side <dtype>: through weft serve, REPS rounds of (bandwidth probe, one decode request), then
# the prompt speed. Prints "decode_best decode_median triad_best triad_median prompt_tok/s".
weft_side() {
  start_server "$1" --slots 1 --batch-tokens 512
  local pid=$server_pid url=$server_url
  : >decodes
  : >triads
  : >shares
  local before after d steady
  before=$(bandwidth)
  for _ in $(seq "$REPS"); do
    echo "$before" >>triads
    "$WEFT" bench serve --url "$url" --requests 1 --rate inf --max-concurrency 1 --prompt-len 8 \
      --output-len 128 --json decode.json >/dev/null
    d=$(decode_speed decode.json)
    echo "$d" >>decodes
    # The probe after a request is the next one's before. A round whose two probes differ by
    # more than a tenth read a window that moved under it: its bound is not known.
    after=$(bandwidth)
    steady=$(awk -v a="$before" -v b="$after" 'BEGIN {
      lo = a < b ? a : b; hi = a < b ? b : a; if (hi - lo <= 0.1 * hi) print (a + b) / 2 }')
    [ -z "$steady" ] ||
      awk -v d="$d" -v b="$(bound "$steady" "$1")" 'BEGIN { printf "%.3f\n", d / b }' >>shares
    before=$after
  done
  "$WEFT" bench serve --url "$url" --requests 4 --rate inf --max-concurrency 1 --prompt-len 512 \
    --output-len 1 --json prompt.json >/dev/null
  kill $pid
  wait $pid || true
  echo "$1 rounds (triad GB/s before, decode tok/s):" $(paste -d/ triads decodes) >&2
  echo "$1: $(wc -l <shares) of $REPS rounds read a steady window (probes before and after within" \
    "10%); their decode as shares of their own bound: $(sort -g shares | tr '\n' ' ')(median" \
    "$(median3 <shares))" >&2
  echo "$(best_median <decodes) $(best_median <triads) $(prompt_speed prompt.json)"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# one_and_many <url> <name>: 4 requests one at a time, then 32 at 16 at once (8-token prompts, 64
# generated), into <name>_one.json and <name>_many.json; prints "one many" (output tokens/s).
one_and_many() {
  "$WEFT" bench serve --url "$1" --requests 4 --rate inf --max-concurrency 1 --prompt-len 8 \
    --output-len 64 --json "$2_one.json" >/dev/null
  "$WEFT" bench serve --url "$1" --requests 32 --rate inf --max-concurrency 16 --prompt-len 8 \
    --output-len 64 --json "$2_many.json" >/dev/null
  echo "$(node -p "require('$PWD/$2_one.json').output_throughput.toFixed(1)")" \
    "$(node -p "require('$PWD/$2_many.json').output_throughput.toFixed(1)")"
}

# clients16 <dtype>: the issue's 16 concurrent clients against batch 1, in the same minute on one
# `weft serve --slots 16`: 4 requests one at a time, then 32 at 16 at once, 8-token prompts and 64
# generated. The bandwidth probed just before says which of the host's windows it ran in (a
# 16-row step gains nothing from the fast one, batch 1 half again).
clients16() {
  start_server "$1" --slots 16
  local pid=$server_pid url=$server_url bw hand one many
  bw=$(bandwidth)
  # Whether the two cores shared a core complex just before (about 40 ns) or not (160-400 ns):
  # a 16-row step pays for handing its rows between them (docs/serving.md).
  hand=$("$WEFT" bench handoff --passes 5000 --runs 3 | awk '{ printf "%s%s", sep, $3; sep = "/" }')
  read -r one many < <(one_and_many "$url" weft)
  kill $pid
  wait $pid || true
  echo "$one $many" >"clients16_$1"
  echo "$1: 16 clients $many tok/s against 1 client's $one: $(ratio "$many" "$one")x (TTFT p99" \
    "$(node -p "require('$PWD/weft_many.json').ttft_ms.p99.toFixed(0)") ms; triad before $bw GB/s," \
    "core handoff $hand ns)"
}

# llama_server <gguf> <slots>: llama.cpp behind the completions route (llamacpp_server.mjs) in the
# background; sets llama_pid and llama_url (its /v1).
llama_server() {
  node "$SRC/bench/llamacpp_server.mjs" "$npm_prefix" "$PWD/$1" "$THREADS" "$2" >llama.out 2>llama.err &
  llama_pid=$!
  for _ in $(seq 600); do grep -q "http://" llama.out && break; sleep 0.1; done
  llama_url=$(grep -o "http://[0-9.:]*/v1" llama.out) || { cat llama.err; exit 1; }
}

# llama_side <dtype>: the same client, `weft bench serve`, against llama.cpp's side: one slot for
# decode (3 requests of 128 tokens after 8) and prompts (4 of 512 tokens, 1 generated), then 16
# slots for 4 requests one at a time and 32 at 16 at once (8-token prompts, 64 generated), as
# weft serve was timed above. Prints "decode prompt one many".
llama_side() {
  local t=f32 d p one many
  [ "$1" = bf16 ] && t=bf16
  llama_server "smol_$t.gguf" 1
  "$WEFT" bench serve --url "$llama_url" --requests 3 --rate inf --max-concurrency 1 --prompt-len 8 \
    --output-len 128 --json llama_decode.json >/dev/null
  "$WEFT" bench serve --url "$llama_url" --requests 4 --rate inf --max-concurrency 1 --prompt-len 512 \
    --output-len 1 --json llama_prompt.json >/dev/null
  kill $llama_pid
  wait $llama_pid || true
  d=$(decode_speed llama_decode.json)
  p=$(prompt_speed llama_prompt.json)
  llama_server "smol_$t.gguf" 16
  read -r one many < <(one_and_many "$llama_url" llama)
  kill $llama_pid
  wait $llama_pid || true
  echo "$d $p $one $many"
}

printf "%-5s %-24s %-10s %-10s %-18s %-10s\n" dtype "decode tok/s weft (x)" "of bound" llama.cpp \
  "prompt weft (x)" llama.cpp
for dtype in fp32 bf16; do
  t=f32
  [ $dtype = bf16 ] && t=bf16
  weft_side $dtype >"weft_side_$dtype"
  read -r wd wd_median bw bw_median wp <"weft_side_$dtype"
  share=$(ratio "$wd" "$(bound "$bw" $dtype)")
  echo "$dtype: $REPS rounds of (triad, decode) alternated: triad best $bw GB/s (median" \
    "$bw_median), bound $(bound "$bw" $dtype) tok/s; decode best $wd tok/s (median $wd_median:" \
    "$(ratio "$wd_median" "$(bound "$bw_median" $dtype)") of the median triad's bound)" >&2
  lj=$(node "$SRC/bench/llamacpp_speed.mjs" "$npm_prefix" "$PWD/smol_$t.gguf" 512 128 "$THREADS")
  ld=$(node -p "JSON.parse(process.argv[1]).decode_tokens_per_s.toFixed(1)" "$lj")
  lp=$(node -p "JSON.parse(process.argv[1]).prompt_tokens_per_s.toFixed(1)" "$lj")
  printf "%-5s %-24s %-10s %-10s %-18s %-10s\n" $dtype "$wd ($(ratio "$wd" "$ld")x)" \
    "$(awk -v s="$share" 'BEGIN { printf "%.0f%%", 100 * s }')" "$ld" \
    "$wp ($(ratio "$wp" "$lp")x)" "$lp"
done
for dtype in fp32 bf16; do clients16 $dtype; done
# The serving benchmark's own figures of both servers: llama.cpp's side adds node's HTTP layer to
# its library's speed above, as a server does.
echo "weft bench serve against both servers (tokens/s; decode 1000 / TPOT p50, prompt 512 / TTFT" \
  "p50; llama.cpp through bench/llamacpp_server.mjs):"
printf "%-5s %-22s %-22s %-22s %-22s %-16s\n" dtype "decode weft (x)" "prompt weft (x)" \
  "1 client weft (x)" "16 clients weft (x)" "llama.cpp 16/1"
for dtype in fp32 bf16; do
  read -r ld lp lone lmany < <(llama_side $dtype)
  read -r wd _ _ _ wp < <(cat "weft_side_$dtype")
  read -r wone wmany <"clients16_$dtype"
  printf "%-5s %-22s %-22s %-22s %-22s %-16s\n" $dtype "$wd ($(ratio "$wd" "$ld")x of $ld)" \
    "$wp ($(ratio "$wp" "$lp")x of $lp)" "$wone ($(ratio "$wone" "$lone")x of $lone)" \
    "$wmany ($(ratio "$wmany" "$lmany")x of $lmany)" "$(ratio "$lmany" "$lone")x"
done
echo "load after: $(bench_load)"
