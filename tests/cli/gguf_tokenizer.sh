# `weft export --format gguf --tokenizer`: a Hugging Face tokenizer.json written as llama.cpp's
# "gpt2" tokenizer (tokens, token types, merges, BOS/EOS, pre-tokenizer name). llama.cpp itself
# (node-llama-cpp) tokenizes a sentence that separates the pre-tokenizers (contractions in capitals,
# digit runs, runs of spaces, tabs, newlines, non-ASCII) into weft's ids and detokenizes them back
# to the sentence, with weft's end-of-text token as its EOS, for the test tokenizers of GPT-2's,
# Qwen2's, SmolLM's and Llama 3's pre-tokenizers (and Llama 3's bos_token as its BOS). A
# pre-tokenizer llama.cpp has not is one clear error before a file is written. The llama.cpp part
# is skipped (exit 77) only when npm cannot install node-llama-cpp.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model llama-tiny --data data/tinyshakespeare_train.bin --out run --steps 1 \
  --batch-size 1 --seq-len 16 --peak-gflops 100 >train.log 2>&1 || { cat train.log; exit 1; }
toks="$SRC/tests/data/tokenizers"
expect_error "llama.cpp has no pre-tokenizer equal to" x.gguf \
  -- export --ckpt run --out x.gguf --format gguf --tokenizer "$toks/prefix_digits"
expect_error "excludes" x.gguf \
  -- export --ckpt run --out x.gguf --format gguf --tokenizer "$toks/qwen2" --tokenizer-dir "$SRC/data"
expect_error "--tokenizer applies to --format gguf only" x -- export --ckpt run --out x --tokenizer "$toks/qwen2"

# One line break only: `weft prepare` cuts documents at blank lines.
printf "IT'S 12345 o'clock,   Hello\tworld!\n  Café déjà vu: 3.14159 x42, weft!!!!\n" >sentence.txt
# The Llama 3 test tokenizer's five vocabulary entries no merge makes (ignore_merges: " weft" and
# "!!!!" are whole tokens) sit at ids up to 127999, past llama-tiny's 50257: renumbered to follow
# the others, so that the model takes it.
mkdir llama3
jq '(.model.vocab | to_entries | map(select(.value > 5255)) | sort_by(.value) | to_entries
     | map({key: .value.key, value: (5256 + .key)}) | from_entries) as $high
    | .model.vocab |= (with_entries(select(.value <= 5255)) + $high)' \
  "$toks/llama3/tokenizer.json" >llama3/tokenizer.json
cp "$toks/llama3/tokenizer_config.json" llama3/
names=(gpt2 qwen2 smollm llama3)
tok_of() { [ "$1" = llama3 ] && echo llama3 || echo "$toks/$1"; }
for t in "${names[@]}"; do
  "$WEFT" export --ckpt run --out "$t.gguf" --format gguf --tokenizer "$(tok_of "$t")" >/dev/null
  # weft's ids of the sentence: the token file of `weft prepare`, whose first token (the
  # end-of-text before the document) goes to the validation file.
  "$WEFT" prepare --input sentence.txt --out "ids-$t" --val-tokens 1 --tokenizer "$(tok_of "$t")" >/dev/null
  od -An -tu2 -j1024 -v "ids-$t/sentence_train.bin" | tr -s ' \n' ',' | sed 's/^,//; s/,$//' >"ids-$t.txt"
  od -An -tu2 -j1024 -v "ids-$t/sentence_val.bin" | tr -d ' \n' >"eot-$t.txt"
done

need_node_llama_cpp
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node "$SRC/tests/cli/gguf_tokenize.mjs" "$cache" sentence.txt \
  "${names[@]/%/.gguf}" >llama.txt 2>&1 || bad "llama.cpp: $(cat llama.txt)"
for t in "${names[@]}"; do
  line=$(grep -F "\"$t.gguf\"" llama.txt) || { bad "$t: no answer from llama.cpp: $(cat llama.txt)"; continue; }
  got=$(jq -c .ids <<<"$line" | tr -d '[]')
  want=$(cat "ids-$t.txt")
  [ "$got" = "$want" ] && ok "$t: llama.cpp's ids = weft's ($(tr ',' '\n' <<<"$want" | wc -l) tokens)" \
    || bad "$t: llama.cpp $got, weft $want"
  [ "$(jq -r .text <<<"$line")" = "$(cat sentence.txt)" ] && ok "$t: llama.cpp detokenizes them to the sentence" \
    || bad "$t: llama.cpp detokenizes to $(jq .text <<<"$line")"
  [ "$(jq .eos <<<"$line")" = "$(cat "eot-$t.txt")" ] && ok "$t: llama.cpp's EOS is weft's end of text, $(cat "eot-$t.txt")" \
    || bad "$t: llama.cpp's EOS $(jq .eos <<<"$line"), weft's $(cat "eot-$t.txt")"
done
bos=$(grep -F '"llama3.gguf"' llama.txt | jq .bos)
[ "$bos" = 5261 ] && ok "llama3: llama.cpp's BOS is tokenizer_config.json's <|begin_of_text|>, 5261" \
  || bad "llama3: llama.cpp's BOS $bos, expected 5261"
finish
