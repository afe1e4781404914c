# weft distill-data: a model's own continuations of passages of a token file, written as a token
# file: its tokens are `weft sample`'s greedy continuation of the same passage, `weft train
# --teacher` reads it as --data, and bad inputs are refused with one error each before any work.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --n-positions 64 --data data/tinyshakespeare_train.bin --batch-size 2 \
  --seq-len 32 --peak-gflops 100 --out run --steps 2 >/dev/null 2>&1
# One passage that is exactly `--prompt "ROMEO:"`'s tokens: prepare's file after its first token
# (the end-of-text that starts a document, which --val-tokens 1 takes).
printf 'ROMEO:' >romeo.txt
"$WEFT" prepare --input romeo.txt --out romeo --tokenizer-dir "$SRC/data" --val-tokens 1 >/dev/null
g=(distill-data --ckpt run --data romeo/romeo_train.bin --passages 1 --prompt-tokens 3 --tokens 30)
"$WEFT" "${g[@]}" --out greedy.bin >made.out 2>&1 && ok "$(cat made.out)" || bad "distill-data: $(cat made.out)"
"$WEFT" sample --ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 30 --temperature 0 \
  --ignore-eos >sample.txt 2>/dev/null
# The file's tokens as bytes through GPT-2's vocabulary (its byte-to-character map), against the
# text weft sample printed (the prompt, its continuation and a newline).
same=$(python3 - "$SRC/data/encoder.json" greedy.bin sample.txt <<'PY'
import json, struct, sys
ids = {v: k for k, v in json.load(open(sys.argv[1])).items()}
bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte = {chr(c): b for b, c in zip(bs, cs)}
d = open(sys.argv[2], "rb").read()
tokens = struct.unpack("<256i", d[:1024])[2]
text = bytes(byte[ch] for t in struct.unpack(f"<{tokens}H", d[1024:]) for ch in ids[t])
print(int(text == open(sys.argv[3], "rb").read()[:-1]))
PY
)
[ "$same" = 1 ] && ok "its tokens are weft sample's greedy text: $(head -c 60 sample.txt)" ||
  bad "distill-data's tokens are not weft sample's greedy text ($(head -c 60 sample.txt))"
"$WEFT" "${g[@]}" --spec ngram --out ngram.bin >/dev/null 2>&1
cmp -s greedy.bin ngram.bin && ok "--spec ngram: the same file" || bad "--spec ngram changed the tokens"
[ -f greedy.idx ] && ok "its document index is beside it" || bad "no greedy.idx"
# Several passages of the corpus, then 2 steps of distillation on them.
"$WEFT" distill-data --ckpt run --data data/tinyshakespeare_train.bin --passages 4 --prompt-tokens 16 \
  --tokens 24 --out many.bin >/dev/null 2>&1
[ "$(stat -c %s many.bin)" = $((1024 + 2 * 4 * 40)) ] && ok "4 passages of 16 + 24 tokens" ||
  bad "many.bin is $(stat -c %s many.bin) bytes"
"$WEFT" train --model tiny --n-layer 1 --n-positions 64 --data many.bin --batch-size 2 --seq-len 32 \
  --peak-gflops 100 --steps 2 --eval-every 0 --teacher run --out draft >train.out 2>&1
[ "$(metric draft/metrics.jsonl loss | wc -l)" = 2 ] && ok "weft train --teacher run --data many.bin: 2 steps" ||
  bad "training on it: $(tail -3 train.out)"
d=(distill-data --ckpt run --data data/tinyshakespeare_val.bin)
expect_error "missing is not a directory (expected a checkpoint directory or a run directory)" o.bin -- distill-data --ckpt missing --data data/tinyshakespeare_val.bin --out o.bin
expect_error "nothing.bin" o.bin -- distill-data --ckpt run --data nothing.bin --out o.bin
expect_error "--passages must be between 1 and " o.bin -- "${d[@]}" --prompt-tokens 8 --tokens 8 --passages 0 --out o.bin
expect_error "--passages must be between 1 and 2 (the distinct passages of 2 tokens in --data's 3), got 3" o.bin -- distill-data --ckpt run --data romeo/romeo_train.bin --passages 3 --prompt-tokens 2 --tokens 8 --out o.bin
expect_error "--tokens must be between 1 and 48 (--prompt-tokens 16 and the continuation within the model's context of 64), got 49" o.bin -- "${d[@]}" --prompt-tokens 16 --tokens 49 --out o.bin
expect_error "--tokens must be between 1 and 48" o.bin -- "${d[@]}" --prompt-tokens 16 --tokens 0 --out o.bin
expect_error "--prompt-tokens must be between 1 and 63 (below the model's context of 64, to leave room for a continuation), got 64" o.bin -- "${d[@]}" --prompt-tokens 64 --out o.bin
expect_error "--data holds 3 tokens, fewer than one passage of --prompt-tokens 16" o.bin -- distill-data --ckpt run --data romeo/romeo_train.bin --prompt-tokens 16 --tokens 8 --out o.bin
expect_error "--spec must be none or ngram, got 'draft'" o.bin -- "${d[@]}" --prompt-tokens 8 --tokens 8 --spec draft --out o.bin
expect_error "--temperature must be non-negative, got -1" o.bin -- "${d[@]}" --prompt-tokens 8 --tokens 8 --temperature -1 --out o.bin
expect_error "--out o.txt: expected a token file named FILE.bin" o.txt -- "${d[@]}" --prompt-tokens 8 --tokens 8 --out o.txt
expect_error "--out data/tinyshakespeare_val.bin is --data" "" -- "${d[@]}" --prompt-tokens 8 --tokens 8 --out data/tinyshakespeare_val.bin
expect_error "--out nodir/o.bin: its directory nodir does not exist" nodir -- "${d[@]}" --prompt-tokens 8 --tokens 8 --out nodir/o.bin
finish
