# weft prepare --tokenizer: a Hugging Face tokenizer.json (or its directory) instead of GPT-2's
# files. Token ids are those of Hugging Face's tokenizers (scripts/gen_tokenizer_golden.mjs made
# the test tokenizers and their golden ids); ids past 65535 take llm.c's uint32 layout; a bad
# --tokenizer is one clear error with nothing written.
source "$(dirname "$0")/lib.sh"
TOK=$SRC/tests/data/tokenizers

# An llm.c token file: "magic version count", then its tokens, each as one line of words.
header() { od -An -t d4 -N 12 "$1" | xargs; }
tokens() { od -An -t "u$2" -j 1024 -v "$1" | xargs; }

printf 'weft weft  weft\n\nThe end of weft.\n' >story.txt

# The Llama 3-like test tokenizer, by its directory: end-of-text 5262 (<|end_of_text|>, named by
# its tokenizer_config.json), " weft" 127995. Ids from the reference: "weft weft  weft\n\n" is
# 127996 127995 220 127995 628, "The end of weft.\n" is 464 886 286 127995 13 198.
out=$("$WEFT" prepare --tokenizer "$TOK/llama3" --input story.txt --out d3 --val-tokens 3)
[ "$(header d3/story_val.bin)" = "20240801 7 3" ] && ok "val file in the uint32 layout" ||
  bad "val header: $(header d3/story_val.bin)"
[ "$(header d3/story_train.bin)" = "20240801 7 10" ] && ok "train file in the uint32 layout" ||
  bad "train header: $(header d3/story_train.bin)"
got="$(tokens d3/story_val.bin 4) $(tokens d3/story_train.bin 4)"
want="5262 127996 127995 220 127995 628 5262 464 886 286 127995 13 198"
[ "$got" = "$want" ] && ok "Llama 3-like ids as Hugging Face gives them" || bad "ids '$got', expected '$want'"
grep -q "story_train.bin: 10 tokens" <<<"$out" && ok "reports the counts" || bad "output: $out"

# The GPT-2-like test tokenizer, by its file: no tokenizer_config.json, so <|endoftext|> (5256).
"$WEFT" prepare --tokenizer "$TOK/gpt2/tokenizer.json" --input story.txt --out d2 --val-tokens 4 >/dev/null
[ "$(header d2/story_val.bin)" = "20240520 1 4" ] && ok "small vocabulary: uint16 layout" ||
  bad "val header: $(header d2/story_val.bin)"
got="$(tokens d2/story_val.bin 2) $(tokens d2/story_train.bin 2)"
want="5256 732 701 356 701 220 356 701 628 5256 464 886 286 356 701 13 198"
[ "$got" = "$want" ] && ok "GPT-2-like ids as Hugging Face gives them" || bad "ids '$got', expected '$want'"

# Bad --tokenizer values: one message naming the path and what is wrong, and no output.
expect_error "tokenizer.json 'nosuch.json' does not exist" out -- \
  prepare --tokenizer nosuch.json --input story.txt --out out
mkdir empty
expect_error "tokenizer directory 'empty' has no tokenizer.json" out -- \
  prepare --tokenizer empty --input story.txt --out out
sed 's/"type":"BPE"/"type":"Unigram"/' "$TOK/gpt2/tokenizer.json" >unigram.json
expect_error "unigram.json: model type 'Unigram' is not supported" out -- \
  prepare --tokenizer unigram.json --input story.txt --out out
echo '{"model": ' >broken.json
expect_error "tokenizer.json 'broken.json' is not valid JSON" out -- \
  prepare --tokenizer broken.json --input story.txt --out out
expect_error "excludes" out -- \
  prepare --tokenizer "$TOK/gpt2" --tokenizer-dir "$SRC/data" --input story.txt --out out
finish
