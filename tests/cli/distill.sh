# Distillation (weft train --teacher): a smaller model trained on a frozen teacher's
# distributions, used as the teacher's draft, keeps plain greedy text (fp32, bf16); bad inputs
# are refused with one error each before any work.
source "$(dirname "$0")/lib.sh"
prepare_data
d=(--data data/tinyshakespeare_train.bin --batch-size 2 --seq-len 32 --peak-gflops 100)
"$WEFT" train --model tiny --n-positions 64 "${d[@]}" --out run --steps 2 2>/dev/null
"$WEFT" train --model tiny --n-layer 1 --n-head 2 --n-embd 64 --n-positions 64 "${d[@]}" \
  --out draft --steps 3 --teacher run --distill-weight 0.5 --distill-temperature 2 >train.out 2>&1
grep -q "distilling from --teacher run (.* parameters, frozen; weights .* MiB + forward .* MiB + logits .* MiB): loss = 0.5 CE + 0.5 x 2^2 KL" train.out &&
  ok "trained: $(grep distilling train.out)" || bad "training: $(cat train.out)"
grep -q "memory estimate per rank: .* + teacher [0-9.]* MiB" train.out && ok "the estimate has the teacher's term" ||
  bad "no teacher in the estimate: $(grep estimate train.out)"
[ -f draft/checkpoints/step_000003/manifest.json ] && ok "saved as a checkpoint" || bad "no checkpoint: $(ls -R draft)"
for dtype in fp32 bf16; do
  p=(--ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 40 --temperature 0 --dtype $dtype)
  plain=$("$WEFT" sample "${p[@]}")
  fast=$("$WEFT" sample "${p[@]}" --spec draft --draft draft --spec-tokens 3 2>draft.err)
  [ "$fast" = "$plain" ] && ok "--spec draft (distilled) $dtype: greedy text unchanged ($(grep speculation draft.err))" ||
    bad "--spec draft with the distilled draft changed the $dtype text"
done
# Under data parallelism each rank's teacher reads its own rows: the losses of one process.
k=(--model tiny --n-layer 1 --n-head 2 --n-embd 64 --n-positions 64 --data data/tinyshakespeare_train.bin
  --batch-size 4 --seq-len 32 --peak-gflops 100 --steps 3 --teacher run --eval-every 0)
"$WEFT" train "${k[@]}" --out dp1 >/dev/null 2>&1
OMP_NUM_THREADS=1 mpirun -np 2 "$WEFT" train "${k[@]}" --dp 2 --out dp2 >/dev/null 2>&1
one=$(metric dp1/metrics.jsonl loss | tr '\n' ' ') two=$(metric dp2/metrics.jsonl loss | tr '\n' ' ')
# The first step's loss is the same bits; later ones differ by the gradients' sum order (1e-5).
close=$(awk -v a="$one" -v b="$two" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ");
  ok = n == 3 && m == 3 && x[1] == y[1]; for (i = 1; i <= n; i++) { d = x[i] - y[i];
  if (d < 0) d = -d; if (d > 1e-5 * x[i]) ok = 0 } print ok }')
[ "$close" = 1 ] && ok "--dp 2: the losses of one process ($two)" || bad "--dp 2 losses '$two' vs one process '$one'"
# A teacher of another vocabulary: a Hugging Face directory of the run whose config says so.
"$WEFT" export --ckpt run --out hf >/dev/null 2>&1
jq '.vocab_size = 1000' hf/config.json >hf/c.json && mv hf/c.json hf/config.json
s=(train --model tiny --n-layer 1 "${d[@]}" --steps 1)
expect_error "--distill-weight must be between 0 and 1 (the KL's share of the loss), got 1.5" o1 -- "${s[@]}" --out o1 --teacher run --distill-weight 1.5
expect_error "--distill-temperature must be a positive number, got 0" o2 -- "${s[@]}" --out o2 --teacher run --distill-temperature 0
expect_error "--distill-weight is for --teacher RUN" o3 -- "${s[@]}" --out o3 --distill-weight 0.5
expect_error "--distill-temperature is for --teacher RUN" o4 -- "${s[@]}" --out o4 --distill-temperature 2
expect_error "--teacher hf: its vocabulary has 1000 ids, the model's 50257 (expected a teacher with the model's tokenizer and vocabulary)" o5 -- "${s[@]}" --out o5 --teacher hf
expect_error "--teacher run: its context is 64 positions, shorter than --seq-len 128" o6 -- train --model tiny --n-layer 1 --n-positions 128 --data data/tinyshakespeare_train.bin --seq-len 128 --batch-size 1 --steps 1 --out o6 --teacher run
expect_error "missing" o7 -- "${s[@]}" --out o7 --teacher missing
expect_error "--teacher distills on one process or under data parallelism only, got dp=0 tp=2" o8 -- "${s[@]}" --out o8 --teacher run --tp 2
expect_error "--teacher distills in fp32, got --dtype bf16" o9 -- "${s[@]}" --out o9 --teacher run --dtype bf16
expect_error "--teacher reads plain windows: drop --pack documents" o10 -- "${s[@]}" --out o10 --teacher run --pack documents
expect_error "--teacher needs the loss's gradient, which --optimizer mezo does not take" o11 -- "${s[@]}" --out o11 --teacher run --optimizer mezo
expect_error "--teacher run is for training a model; --ppd-tokens distills from --base" o12 -- train --ppd-tokens 2 --base run --teacher run --out o12
# The teacher's memory is in the check before any work: on a node of 200 MiB (WEFT_TEST_MEMORY_MIB,
# a testing aid) the student fits alone and is refused with its teacher (its logits of 512 rows
# of 50257), the error naming the teacher's share.
m=(train --model tiny --n-layer 1 --n-positions 64 --data data/tinyshakespeare_train.bin --batch-size 8
  --seq-len 64 --peak-gflops 100 --steps 1 --eval-every 0)
WEFT_TEST_MEMORY_MIB=200 "$WEFT" "${m[@]}" --out alone >/dev/null 2>&1 && ok "the student alone fits 200 MiB" ||
  bad "the student alone was refused on 200 MiB"
WEFT_TEST_MEMORY_MIB=200 expect_error "model 'tiny' with --teacher run needs about 264.9 MiB on this node's 1 rank(s) (per rank up to weights 12.5 MiB + gradients 12.5 MiB + optimizer 25.0 MiB + activations 2.4 MiB + buffers 99.3 MiB + teacher 113.2 MiB (weights 12.7 MiB + forward 2.4 MiB + logits 98.2 MiB)), but the node has 200.0 MiB available" o13 -- "${m[@]}" --out o13 --teacher run
finish
