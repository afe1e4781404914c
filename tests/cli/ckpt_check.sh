# Checkpoint tools on inputs that are not what they expect: a Hugging Face directory is not a
# checkpoint, and convert's errors name its own flag.
source "$(dirname "$0")/lib.sh"
prepare_data
common=(--data data/tinyshakespeare_train.bin --steps 2 --batch-size 2 --seq-len 32 --peak-gflops 1)
"$WEFT" train "${common[@]}" --out run >/dev/null 2>&1
"$WEFT" export --ckpt run --out hf >/dev/null

# A Hugging Face directory is not a checkpoint; convert's errors name its --to-hf.
expect_error "hf is a Hugging Face model directory (config.json), not a weft checkpoint" "" -- ckpt inspect hf
expect_error "--to-hf run holds metrics.jsonl, which an export would delete" "" -- ckpt convert run --to-hf run
finish
