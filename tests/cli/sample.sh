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
finish
