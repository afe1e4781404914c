# Parallel Prompt Decoding: prompt tokens trained for a frozen model (weft train --ppd-tokens)
# change no greedy output when they guess (weft sample --spec ppd), fp32 and bf16; bad inputs
# are refused before any work.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 2 \
  --batch-size 2 --seq-len 32 --peak-gflops 100 2>/dev/null
"$WEFT" train --ppd-tokens 2 --base run --data data/tinyshakespeare_train.bin --out ppd \
  --steps 3 --batch-size 2 --seq-len 24 --lr 1e-2 >train.out 2>&1
grep -q "2 prompt tokens, 128 parameters" train.out && ok "trained: $(head -1 train.out)" || bad "training: $(cat train.out)"
grep -q "PPD memory estimate: weights .* + teacher [0-9.]* MiB + baseline" train.out && ok "$(grep estimate train.out)" ||
  bad "no teacher term in the PPD estimate: $(cat train.out)"
# The base model's own forward is in the check before any work (WEFT_TEST_MEMORY_MIB, a testing
# aid: the node's available memory).
WEFT_TEST_MEMORY_MIB=30 expect_error "--ppd-tokens over --base run needs about 27.4 MiB on this node's 1 rank(s) (weights 12.7 MiB + grads 12.7 MiB + optimizer 0.0 MiB + activations 0.4 MiB + scratch 0.9 MiB + teacher 0.6 MiB" small -- train --ppd-tokens 2 --base run --data data/tinyshakespeare_train.bin --out small --steps 3 --batch-size 2 --seq-len 24
[ -f ppd/checkpoints/step_000003/manifest.json ] && ok "saved as a checkpoint" || bad "no checkpoint: $(ls -R ppd)"
for dtype in fp32 bf16; do
  p=(--ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 40 --temperature 0 --dtype $dtype)
  plain=$("$WEFT" sample "${p[@]}")
  fast=$("$WEFT" sample "${p[@]}" --spec ppd --ppd ppd 2>ppd.err)
  [ "$fast" = "$plain" ] && ok "--spec ppd $dtype: greedy text unchanged ($(tr '\n' ' ' <ppd.err))" || bad "--spec ppd $dtype changed the text"
  fast=$("$WEFT" sample "${p[@]}" --spec ppd --ppd ppd --spec-vocab 256 --spec-vocab-from data/tinyshakespeare_train.bin)
  [ "$fast" = "$plain" ] && ok "--spec ppd $dtype --spec-vocab 256: greedy text unchanged" || bad "--spec ppd $dtype --spec-vocab changed the text"
  fast=$("$WEFT" sample "${p[@]}" --spec ppd --ppd ppd --spec-tree 5 --spec-tokens 2 2>tree.err)
  [ "$fast" = "$plain" ] && ok "--spec ppd $dtype --spec-tree 5: greedy text unchanged ($(tr '\n' ' ' <tree.err))" || bad "--spec ppd $dtype --spec-tree changed the text"
done
# Acceptance measured on held-out text, saved beside the prompts, and the tree chosen from it.
"$WEFT" ppd-acceptance --ckpt run --ppd ppd --data data/tinyshakespeare_val.bin --prompts 2 \
  --prompt-tokens 16 --tokens 12 --width 3 >acc.out 2>&1
rates=ppd/checkpoints/step_000003/ppd_acceptance.json
[ "$(jq '.acceptance | length' $rates 2>/dev/null)" = 2 ] && [ "$(jq '.acceptance[0] | length' $rates)" = 3 ] &&
  ok "ppd-acceptance: $(head -1 acc.out)" || bad "ppd-acceptance: $(cat acc.out)"
fast=$("$WEFT" sample "${p[@]}" --spec ppd --ppd ppd --spec-tree 4)
[ "$fast" = "$plain" ] && ok "--spec-tree 4 from the measured rates: greedy text unchanged" || bad "--spec-tree with measured rates changed the text"
# weft serve --spec ppd with the tree of 4 from the measured rates (its prompt rows over the
# data's 4096 most frequent ids): the greedy text of weft sample, two requests at once, and
# /metrics counts the verifies and their guesses, more than a chain of 2 would make.
"$WEFT" serve --ckpt run --tokenizer-dir "$SRC/data" --port 0 --kv-cache-gib 0.001 --threads 2 \
  --spec ppd --ppd ppd --spec-tree 4 --dtype bf16 --spec-vocab-from data/tinyshakespeare_train.bin \
  >serve.out 2>serve.err &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*" serve.out) || { cat serve.err; bad "no start line with --spec ppd"; finish; exit 1; }
complete() { curl -s --max-time 60 -d '{"prompt":"'"$1"'","max_tokens":40,"temperature":0}' "$url/v1/completions"; }
complete "To be" >other.json &
served=$(complete "ROMEO:" | jq -r .choices[0].text)
wait $!
[ "ROMEO:$served" = "$plain" ] && ok "serve --spec ppd --spec-tree 4 bf16: greedy text of weft sample" || bad "serve --spec ppd: 'ROMEO:$served' vs '$plain'"
met=$(curl -s --max-time 10 "$url/metrics")
v=$(awk '/^weft_spec_verifies_total/ { print $2 }' <<<"$met")
g=$(awk '/^weft_spec_guessed_tokens_total/ { print $2 }' <<<"$met")
[ "${v:-0}" -gt 0 ] && [ "${g:-0}" -gt $((2 * ${v:-0})) ] && ok "serve --spec ppd --spec-tree 4: $v verifies of $g guesses" || bad "metrics: $met"
kill -TERM $pid
wait $pid || bad "serve --spec ppd: exit $?: $(cat serve.err)"
grep -q "by depth:" ppd.err && ok "acceptance by depth printed" || bad "no figures: $(cat ppd.err)"
expect_error "--ppd-tokens must be between 1 and 16, got 20" out1 -- train --ppd-tokens 20 --base run --out out1
expect_error "--ppd-tokens 2 needs --base" out2 -- train --ppd-tokens 2 --out out2
expect_error "--base run is for --ppd-tokens K" out3 -- train --base run --out out3
expect_error "--ppd-target must be argmax or sample, got 'soft'" out4 -- train --ppd-tokens 2 --base run --ppd-target soft --out out4
expect_error "--ppd-tokens: --base gives the model, so drop --model llama-tiny" out5 -- train --ppd-tokens 2 --base run --model llama-tiny --out out5
expect_error "run directory ppd already holds checkpoints" "" -- train --ppd-tokens 2 --base run --out ppd
expect_error "--spec ppd needs --ppd" "" -- sample --ckpt run --spec ppd
expect_error "--ppd ppd is for --spec ppd, got --spec ngram" "" -- sample --ckpt run --spec ngram --ppd ppd
expect_error "is not a Parallel Prompt Decoding checkpoint" "" -- sample --ckpt run --spec ppd --ppd run
expect_error "--spec-vocab-from runs with --tp 1 only under --spec ppd, got --tp 2" "" -- serve --ckpt run --spec ppd --ppd ppd --tp 2 --spec-vocab-from data/tinyshakespeare_train.bin
expect_error "is not a Parallel Prompt Decoding checkpoint" "" -- serve --ckpt run --spec ppd --ppd run
expect_error "--spec-vocab-from runs with --tp 1 only under --spec ppd, got --tp 2" "" -- sample --ckpt run --spec ppd --ppd ppd --tp 2 --spec-vocab-from data/tinyshakespeare_train.bin
expect_error "--spec-tree must be 0 (a chain of guesses) or more nodes, got -1" "" -- sample --ckpt run --spec ppd --ppd ppd --spec-tree -1
expect_error "--spec-tree 4 is for --spec ppd" "" -- sample --ckpt run --spec ngram --spec-tree 4
expect_error "--spec-tree 4 is for --spec ppd" "" -- serve --ckpt run --spec ngram --spec-tree 4
expect_error "--width must be at least 1, got 0" "" -- ppd-acceptance --ckpt run --ppd ppd --data data/tinyshakespeare_val.bin --width 0
expect_error "is not a Parallel Prompt Decoding checkpoint" "" -- ppd-acceptance --ckpt run --ppd run --data data/tinyshakespeare_val.bin
echo '{"acceptance": [[0.5], [2]]}' >$rates
expect_error "rate 2 is not a number in [0, 1]" "" -- sample --ckpt run --spec ppd --ppd ppd --spec-tree 4
finish
