# Export to a Hugging Face directory, import it back: identical weights and loss.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 3 \
  --batch-size 4 --seq-len 32 --peak-gflops 100 2>/dev/null
"$WEFT" export --ckpt run --out hf
[ -f hf/config.json ] && grep -q '"n_embd": 64' hf/config.json && ok "config.json" || bad "config.json"
grep -q 'transformer.h.0.attn.c_attn.weight' hf/model.safetensors && ok "GPT2LMHeadModel names" || bad "names"
e=(--data data/tinyshakespeare_val.bin --batch-size 2 --seq-len 64 --batches 3 --json)
a=$("$WEFT" eval --ckpt run "${e[@]}")
b=$("$WEFT" eval --model-dir hf "${e[@]}")
echo "checkpoint: $a"; echo "hf:         $b"
[ "$a" = "$b" ] && ok "identical loss" || bad "loss differs"
# Start a run from the exported directory, export it again without training: same bytes.
"$WEFT" train --model-dir hf --data data/tinyshakespeare_train.bin --out run2 --steps 1 \
  --batch-size 2 --seq-len 32 --lr 1e-30 --weight-decay 0 --peak-gflops 100 2>/dev/null
"$WEFT" export --ckpt run2 --out hf2
c=$("$WEFT" eval --model-dir hf2 "${e[@]}")
[ "$a" = "$c" ] && ok "imported weights evaluate the same after a no-op step" || bad "$a vs $c"
finish
