# A checkpoint is checked against itself before it is read: a manifest edited by hand (another
# n_layer, a range listed in place of another, a field of the wrong type, n_head 0) is BAD in
# `ckpt inspect` and one clear error in eval, ckpt convert and --resume, although every shard's
# digest still matches. Also: --model-dir beside --resume, and messages of inspect and convert.
source "$(dirname "$0")/lib.sh"
prepare_data
common=(--data data/tinyshakespeare_train.bin --steps 2 --batch-size 2 --seq-len 32 --peak-gflops 1)
"$WEFT" train "${common[@]}" --out run >/dev/null 2>&1
"$WEFT" ckpt inspect run >/dev/null && ok "the written checkpoint inspects OK" || bad "inspect of a good checkpoint failed"

# A copy of run's checkpoint whose manifest.json is edited by the sed script $2.
edited() {
  mkdir -p "$1/checkpoints"
  cp -r run/checkpoints/step_000002 run/checkpoints/latest "$1/checkpoints/"
  sed -i "$2" "$1/checkpoints/step_000002/manifest.json"
  cmp -s "$1/checkpoints/step_000002/manifest.json" run/checkpoints/step_000002/manifest.json \
    && bad "sed '$2' changed nothing"
  return 0
}
edited layers 's/"n_layer": 2/"n_layer": 1/'
edited twice '0,/"h.0.ln_1.bias"/s//"h.0.ln_1.weight"/'
edited typed 's/"tp": 1,/"tp": "1",/'
edited heads 's/"n_head": 4/"n_head": 0/'
for c in "layers|lists tensor h.1.attn.c_attn.bias, which the model of its config (gpt2 with n_layer 1" \
         "twice|element 0 of tensor h.0.ln_1.weight (param) is held twice" \
         "typed|shards[0].tp is \"1\" (string), expected an integer" \
         "heads|n_head must be positive, got 0"; do
  d=${c%%|*} want=${c#*|}
  out=$("$WEFT" ckpt inspect "$d" 2>&1) && bad "inspect $d exited 0" || true
  grep -qF -- "$want" <<<"$out" && ok "inspect $d: $want" || bad "inspect $d: $out"
  [ "$d" = typed ] || grep -q "^manifest BAD: .*$want" <<<"$out" || bad "inspect $d: no 'manifest BAD' line"
  expect_error "$want" "" -- eval --ckpt "$d" --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 8
  expect_error "$want" "hf_$d" -- ckpt convert "$d" --to-hf "hf_$d"
  expect_error "$want" "$d/metrics.jsonl" -- train "${common[@]}" --out "$d" --resume
done

# --model-dir beside --resume names the model too: a missing one or one of another model is
# refused as --model is; the same one continues.
# (Only config.json of hf3 is read: the model is checked before any weight.)
"$WEFT" export --ckpt run --out hf >/dev/null
mkdir hf3 && sed 's/"n_layer": 2/"n_layer": 3/' hf/config.json > hf3/config.json
expect_error "no-such-dir/config.json" "" -- train "${common[@]}" --out run --resume --model-dir no-such-dir
expect_error "resuming run/checkpoints/step_000002: --model-dir hf3 asks for another model than the checkpoint holds (n_layer 2 in the checkpoint, 3 asked)" "" -- train "${common[@]}" --out run --resume --model-dir hf3
"$WEFT" train "${common[@]}" --out run --resume --model-dir hf >/dev/null 2>&1 \
  && ok "--resume beside the checkpoint's own --model-dir" || bad "--resume with --model-dir hf refused"

# A Hugging Face directory is not a checkpoint; convert's errors name its --to-hf.
expect_error "hf is a Hugging Face model directory (config.json), not a weft checkpoint" "" -- ckpt inspect hf
expect_error "--to-hf run holds metrics.jsonl, which an export would delete" "" -- ckpt convert run --to-hf run
finish
