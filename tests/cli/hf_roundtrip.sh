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

# Each family's exported directory trains under every axis its preset trains under: the first
# step's loss as in the run it was exported from (unchanged by a step at --lr 1e-30), within
# 1e-5 relative as the layout parity tests. Mixtral's per-expert tensors are whole on each tp
# rank and sliced over ep (with ZeRO 3 each rank keeps a slice of that slice). Qwen2's q/k/v
# biases split over tp as their rows do.
t=(--data data/tinyshakespeare_train.bin --steps 1 --batch-size 2 --seq-len 32 --lr 1e-30
   --weight-decay 0 --peak-gflops 100 --threads 1)
first_loss() { metric "$1/metrics.jsonl" loss | head -1; }
for model in tiny llama-tiny moe-tiny qwen2-tiny; do
  "$WEFT" train --model "$model" "${t[@]}" --out "run_$model" >/dev/null 2>&1
  "$WEFT" export --ckpt "run_$model" --out "hf_$model" >/dev/null
  ref=$(first_loss "run_$model")
  layouts=("2 --tp 2" "2 --pp 2" "2 --cp 2")
  [ "$model" = moe-tiny ] && layouts+=("2 --ep 2 --zero 3" "4 --tp 2 --ep 2")
  for layout in "${layouts[@]}"; do
    read -r np flags <<<"$layout"
    out="from_${model}_${flags// /}"
    # shellcheck disable=SC2086
    log=$(mpirun -np "$np" "$WEFT" train --model-dir "hf_$model" "${t[@]}" --out "$out" $flags 2>&1) \
      || { bad "$model directory under $flags: $log"; continue; }
    got=$(first_loss "$out")
    awk -v a="$ref" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' \
      && ok "$model directory under $flags: loss $got (exported run $ref)" \
      || bad "$model directory under $flags: loss $got, exported run $ref"
  done
done
finish
