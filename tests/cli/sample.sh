# Sampling: prints the prompt and a deterministic continuation for a seed.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 2 \
  --batch-size 2 --seq-len 32 --peak-gflops 100 2>/dev/null
s=(--ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 300 --top-k 40 --seed 7)
a=$("$WEFT" sample "${s[@]}")
b=$("$WEFT" sample "${s[@]}")
[ "$a" = "$b" ] && ok "same seed, same text" || bad "sampling not deterministic"
[[ "$a" == ROMEO:* ]] && ok "starts with the prompt" || bad "prompt missing: $a"
[ "${#a}" -gt 300 ] && ok "generated past the 256-token window (${#a} chars)" || bad "short output (${#a})"
c=$("$WEFT" sample "${s[@]}" --seed 8)
[ "$a" != "$c" ] && ok "another seed, another text" || bad "seed ignored"
expect_error "--top-p must be in (0, 1]" "" -- sample --ckpt run --top-p 1.5
expect_error "--dtype must be fp32 or bf16, got 'fp16'" "" -- sample --ckpt run --dtype fp16
g=(--ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 20 --temperature 0 --dtype bf16)
b16=$("$WEFT" sample "${g[@]}")
[[ "$b16" == ROMEO:?* && "$b16" = "$("$WEFT" sample "${g[@]}")" ]] && ok "--dtype bf16: $b16" || bad "--dtype bf16: $b16"
# Speculation changes no output: greedy with prompt-lookup guesses is plain greedy, past the
# window's rebuild too; the figures go to stderr.
p=(--ckpt run --tokenizer-dir "$SRC/data" --prompt "$(printf 'to be or not to be, %.0s' {1..6})" --tokens 300 --temperature 0)
plain=$("$WEFT" sample "${p[@]}")
spec=$("$WEFT" sample "${p[@]}" --spec ngram --spec-tokens 6 2>spec.err)
[ "$spec" = "$plain" ] && ok "--spec ngram: greedy text unchanged ($(cat spec.err))" || bad "--spec ngram changed the text"
grep -q "tokens in [0-9]* forwards (tau" spec.err && ok "speculation figures printed" || bad "no figures: $(cat spec.err)"
grep -qE "^weft: timing: prefill [0-9.]+ s \([0-9]+ prompt tokens\), decode [0-9.]+ s for 299 more tokens \([0-9.]+ tokens/s\)$" spec.err && ok "prefill and decode times printed" || bad "no timing: $(cat spec.err)"
expect_error "--spec must be none, ngram, draft or ppd, got 'medusa'" "" -- sample --ckpt run --spec medusa
expect_error "--spec-tokens must be in [0, 64] (the tokens guessed per step; 0: the proposer's default), got 65" "" -- sample --ckpt run --spec ngram --spec-tokens 65
# --spec draft: the model as its own draft keeps every guess, and the text; a draft of another
# vocabulary (its config.json alone is read first) is refused naming both sizes.
d=$("$WEFT" sample "${p[@]}" --spec draft --draft run --spec-tokens 4 2>draft.err)
[ "$d" = "$plain" ] && ok "--spec draft: greedy text unchanged ($(cat draft.err))" || bad "--spec draft changed the text"
grep -qE " ([0-9]+) of \1 guessed tokens accepted" draft.err && ok "its own draft: every guess kept" || bad "guesses rejected: $(cat draft.err)"
"$WEFT" export --ckpt run --out hf >/dev/null
sed -i 's/"vocab_size": 50257/"vocab_size": 50304/' hf/config.json
expect_error "the draft model's vocabulary has 50304 ids, the model's 50257" "" -- sample --ckpt run --spec draft --draft hf
expect_error "--spec draft needs --draft DIR" "" -- sample --ckpt run --spec draft
d=$("$WEFT" sample "${p[@]}" --spec draft --draft run --spec-tokens 3 --draft-width 2 2>draft.err)
[ "$d" = "$plain" ] && ok "--spec draft --draft-width 2: greedy text unchanged ($(cat draft.err))" || bad "--draft-width 2 changed the text"
expect_error "--draft-width must be 1 (a chain of guesses) or more, got 0" "" -- sample --ckpt run --spec draft --draft run --draft-width 0
expect_error "--draft-width 2 is for --spec draft, got --spec ngram" "" -- sample --ckpt run --spec ngram --draft-width 2
expect_error "--draft-width 2 is for --spec draft, got --spec ngram" "" -- serve --ckpt run --spec ngram --draft-width 2
expect_error "--draft run is for --spec draft, got --spec ngram" "" -- sample --ckpt run --spec ngram --draft run
expect_error "--spec draft runs with --tp 1 only, got --tp 2" "" -- sample --ckpt run --spec draft --draft run --tp 2
# --spec-vocab: the draft proposes from the training data's most frequent ids; the text stays.
d=$("$WEFT" sample "${p[@]}" --spec draft --draft run --spec-tokens 4 --spec-vocab 512 \
  --spec-vocab-from data/tinyshakespeare_train.bin 2>draft.err)
[ "$d" = "$plain" ] && ok "--spec-vocab 512: greedy text unchanged ($(cat draft.err))" || bad "--spec-vocab changed the text"
expect_error "--spec-vocab 512 needs --spec-vocab-from FILE" "" -- sample --ckpt run --spec draft --draft run --spec-vocab 512
expect_error "--spec-vocab 60000 is more than the model's 50257 ids" "" -- sample --ckpt run --spec draft --draft run --spec-vocab 60000 --spec-vocab-from data/tinyshakespeare_train.bin
expect_error "--spec-vocab-from data/tinyshakespeare_train.bin is for --spec draft or ppd" "" -- sample --ckpt run --spec ngram --spec-vocab-from data/tinyshakespeare_train.bin
expect_error "--spec-vocab must be 0 (the whole vocabulary) or more, got -1" "" -- sample --ckpt run --spec draft --draft run --spec-vocab -1 --spec-vocab-from data/tinyshakespeare_train.bin
# Generation stops at the end-of-text token unless --ignore-eos: a model trained on nothing but
# end-of-text tokens (an llm.c file: magic 20240520, version 1, 1024 tokens of 50256) says it first.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x00\x04\x00\x00'; head -c 1012 /dev/zero
  printf '\x50\xc4%.0s' {1..1024}; } > eot.bin
"$WEFT" train --model tiny --data eot.bin --out eot --steps 6 --batch-size 2 --seq-len 16 \
  --lr 0.05 --warmup 0 --lr-schedule constant --peak-gflops 100 >/dev/null 2>&1
e=(--ckpt eot --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 3 --temperature 0)
[ "$("$WEFT" sample "${e[@]}")" = "ROMEO:" ] && ok "stops at the end-of-text token" || bad "went past end of text: $("$WEFT" sample "${e[@]}")"
[ "$("$WEFT" sample "${e[@]}" --ignore-eos)" = "ROMEO:<|endoftext|><|endoftext|><|endoftext|>" ] && ok "--ignore-eos goes on" || bad "--ignore-eos: $("$WEFT" sample "${e[@]}" --ignore-eos)"
# Warnings: a tokenizer smaller than the model's vocabulary; a prompt longer than the context.
w=$("$WEFT" sample --ckpt run --tokenizer "$SRC/tests/data/tokenizers/gpt2" --tokens 1 2>&1 >/dev/null)
grep -q "ids, fewer than the model's vocabulary of 50257" <<<"$w" && ok "warns of a small tokenizer" || bad "no warning: $w"
w=$("$WEFT" sample "${s[@]}" --tokens 1 --prompt "$(printf 'to be or not %.0s' {1..80})" 2>&1 >/dev/null)
grep -q "tokens, longer than the model's context of 256: only its last 256 tokens are seen" <<<"$w" && ok "warns of a long prompt" || bad "no warning: $w"
finish
