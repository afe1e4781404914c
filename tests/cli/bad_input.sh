# Every bad input: one clear error, a non-zero exit, and nothing written.
source "$(dirname "$0")/lib.sh"
prepare_data
T="--tokenizer-dir $SRC/data"
common=(--data data/tinyshakespeare_train.bin --steps 2 --batch-size 2 --seq-len 32 --peak-gflops 1)

expect_error "--bogus" runs/a -- train --bogus 3 --out runs/a
expect_error "no-such.bin" runs/a -- train --data no-such.bin --out runs/a
head -c 1000 data/tinyshakespeare_val.bin > trunc.bin
expect_error "trunc.bin" runs/a -- train --data trunc.bin --out runs/a
expect_error "n_embd 66 is not divisible by n_head 4" runs/a -- train "${common[@]}" --n-embd 66 --out runs/a
printf 'n_embd = 66\nn_head = 4\n' > odd.toml
expect_error "n_embd 66 is not divisible by n_head 4" runs/a -- train --config odd.toml "${common[@]}" --out runs/a
printf 'batch_sise = 4\n' > typo.toml
expect_error "unknown key 'batch_sise'" runs/a -- train --config typo.toml "${common[@]}" --out runs/a
expect_error "--batch-size 3 is not a multiple of --micro-batch-size 2" runs/a -- train "${common[@]}" --batch-size 3 --micro-batch-size 2 --out runs/a
expect_error "--seq-len 300 exceeds the model's n_positions 256" runs/a -- train "${common[@]}" --seq-len 300 --out runs/a
expect_error "world size 1" runs/a -- train "${common[@]}" --dp 2 --out runs/a
expect_error "world size 1 is not divisible by tp*pp*cp = 2*1*1 = 2" runs/a -- train "${common[@]}" --tp 2 --out runs/a
expect_error "--sequence-parallel needs --tp greater than 1" runs/a -- train "${common[@]}" --sequence-parallel --out runs/a
expect_error "--pp-layers '1,1' needs --pp greater than 1" runs/a -- train "${common[@]}" --pp-layers 1,1 --out runs/a
expect_error "--pp-schedule gpipe needs --pp greater than 1" runs/a -- train "${common[@]}" --pp-schedule gpipe --out runs/a
expect_error "--cp-kind ulysses needs --cp greater than 1" runs/a -- train "${common[@]}" --cp-kind ulysses --out runs/a
expect_error "--ring-bidirectional needs --cp greater than 1" runs/a -- train "${common[@]}" --ring-bidirectional --out runs/a
expect_error "--dtype must be fp32 or bf16, got 'fp16'" runs/a -- train "${common[@]}" --dtype fp16 --out runs/a
expect_error "fewer than one evaluation batch of 2000 sequences" runs/a -- train "${common[@]}" --batch-size 2000 --out runs/a
expect_error "--keep-checkpoints must be at least 1, got 0" runs/a -- train "${common[@]}" --keep-checkpoints 0 --out runs/a
expect_error "--peak-gflops must be non-negative (0: measure), got -1" runs/a -- train "${common[@]}" --peak-gflops -1 --out runs/a
expect_error "--optimizer 'sgd' is unknown; expected one of adamw, adamw8bit, lion, mezo" runs/a -- train "${common[@]}" --optimizer sgd --out runs/a
expect_error "--optimizer 'sgd' is unknown" "" -- bench train --preset tiny --steps 1 --optimizer sgd
expect_error "--mezo-eps must be positive and finite, got 0" runs/a -- train "${common[@]}" --optimizer mezo --mezo-eps 0 --out runs/a
# A checkpoint holds its optimizer's state: resuming with another is refused, naming both.
"$WEFT" train "${common[@]}" --steps 4 --exit-after 2 --optimizer lion --out runs/lion >/dev/null 2>&1 || bad "lion run failed"
expect_error "resuming with --optimizer adamw but the checkpoint runs/lion/checkpoints/step_000002 holds the state of --optimizer lion" runs/lion/checkpoints/step_000004 -- train "${common[@]}" --steps 4 --resume --out runs/lion
expect_error "--threads must be non-negative, got -2" "" -- bench train --preset tiny --steps 1 --threads -2
expect_error "--peak-gflops must be non-negative (0: measure), got -5" "" -- bench train --preset tiny --steps 1 --peak-gflops -5
expect_error "--seconds: Value -1 not in range" "" -- bench peak --seconds -1

# A Hugging Face directory: bad header, missing tensor, wrong shape.
"$WEFT" train "${common[@]}" --out runs/ok >/dev/null 2>&1
"$WEFT" export --ckpt runs/ok --out hf >/dev/null
mkdir hf_bad && cp hf/config.json hf_bad/
printf '\xff\xff\xff\xff\x00\x00\x00\x00{"a":1}' > hf_bad/model.safetensors
expect_error "model.safetensors" runs/b -- train "${common[@]}" --model-dir hf_bad --out runs/b
expect_error "model.safetensors" "" -- eval --model-dir hf_bad --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 8
# Rewrite a tensor name / shape inside the header (same length, so offsets stay valid).
mkdir hf_missing hf_shape && cp hf/config.json hf_missing/ && cp hf/config.json hf_shape/
sed 's/transformer.h.1.mlp.c_fc.weight/transformer.h.1.mlp.c_fc.wXight/' hf/model.safetensors > hf_missing/model.safetensors
expect_error "h.1.mlp.c_fc.weight' is missing" runs/b -- train "${common[@]}" --model-dir hf_missing --out runs/b
sed 's/"shape":\[64,256\]/"shape":[256,64]/' hf/model.safetensors > hf_shape/model.safetensors
expect_error "expected [64, 256]" runs/b -- train "${common[@]}" --model-dir hf_shape --out runs/b
# A config.json key that makes transformers build another model than weft's is refused by name.
mkdir hf_keys && cp hf/model.safetensors hf_keys/
sed 's/"scale_attn_weights": true/"scale_attn_weights": false/' hf/config.json > hf_keys/config.json
expect_error 'hf_keys/config.json: "scale_attn_weights" is false, expected true (weft scales attention scores by 1/sqrt(head_dim))' runs/b -- train "${common[@]}" --model-dir hf_keys --out runs/b
sed 's/"n_inner": null/"n_inner": 128/' hf/config.json > hf_keys/config.json
expect_error '"n_inner" is 128, expected 256' "" -- eval --model-dir hf_keys --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 8
# Weights the config does not describe are refused by name: a config of 1 layer over 2 layers'.
mkdir hf_extra && cp hf/model.safetensors hf_extra/
sed 's/"n_layer": 2/"n_layer": 1/' hf/config.json > hf_extra/config.json
expect_error "hf_extra/model.safetensors holds 12 tensors that the model of hf_extra/config.json does not have: 'transformer.h.1." runs/b -- train "${common[@]}" --model-dir hf_extra --out runs/b
expect_error "already holds checkpoints" "" -- train "${common[@]}" --out runs/ok
expect_error "resuming with --seed 99 but the checkpoint was trained with 1337" "" -- train "${common[@]}" --out runs/ok --resume --steps 4 --seed 99
[ "$(grep -c '"loss"' runs/ok/metrics.jsonl)" -eq 2 ] && ok "the refused resume trained nothing" || bad "refused resume wrote steps"
# The checkpoint or the Hugging Face directory gives the model: a model flag that asks for another
# is an error, not ignored; the same command line again with --resume still continues.
expect_error "resuming runs/ok/checkpoints/step_000002: --n-layer 3 asks for another model than the checkpoint holds (n_layer 2 in the checkpoint, 3 asked)" "" -- train "${common[@]}" --out runs/ok --resume --n-layer 3
expect_error "--model llama-tiny asks for another model than the checkpoint holds" "" -- train "${common[@]}" --out runs/ok --resume --model llama-tiny
"$WEFT" train "${common[@]}" --out runs/ok --resume --model tiny >/dev/null 2>&1 && ok "resume with the checkpoint's own --model" || bad "resume with --model tiny refused"
expect_error "--model-dir hf: --model gpt2 asks for another model than its config.json holds (n_embd 64 in its config.json, 768 asked)" runs/d -- train "${common[@]}" --model-dir hf --model gpt2 --out runs/d
expect_error "--model-dir hf: --n-layer 4 asks for another model than its config.json holds" runs/d -- train "${common[@]}" --model-dir hf --n-layer 4 --out runs/d
# The command line wins over the config file.
printf 'steps = 3\nbatch_size = 2\nseq_len = 16\n' > c.toml
"$WEFT" train --config c.toml --data data/tinyshakespeare_train.bin --peak-gflops 1 --steps 1 --out runs/c >/dev/null 2>&1
[ "$(grep -c '"loss"' runs/c/metrics.jsonl)" -eq 1 ] && ok "--steps on the command line beat the config file" || bad "config file won over the command line"
expect_error "exactly one of --model-dir" "" -- eval --data data/tinyshakespeare_val.bin
# The model the user named is checked first (here there is no data/encoder.json either).
expect_error "no-such-run is not a directory (expected a checkpoint directory or a run directory)" "" -- sample --ckpt no-such-run --tokens 1
expect_error "--ckpt" "" -- export --out x
# Sizes refused before anything is allocated or written (each once died in OpenMP, in bad_alloc or
# by exhausting memory). The soft limit makes a regression fail here rather than take the machine.
vm_limit=$(ulimit -S -v)
ulimit -S -v 2000000
expect_error "--threads 1000000 is more than the" runs/s -- train "${common[@]}" --threads 1000000 --out runs/s
expect_error "model 'tiny' needs about 744819.7 GiB on this node's 1 rank(s) (at least 5e+13 parameters" runs/s -- train "${common[@]}" --n-layer 1000000000 --out runs/s
expect_error "model 'tiny' with n_positions 1000000000 (from --seq-len) needs about" "" -- bench train --preset tiny --seq-len 1000000000 --steps 1
expect_error "expected a smaller --micro-batch-size or --seq-len" "" -- bench train --preset tiny --batch-size 100000 --seq-len 256 --steps 1
expect_error "pp 1000000 x vpp 1 x 1000000 micro-batches = 1000000000000 (micro-batch, chunk) pairs is past what a schedule can hold" pipe.svg -- pipeline --pp 1000000 --micro-batches 1000000 --svg pipe.svg
mkdir hf_wide hf_vocab && cp hf/model.safetensors hf_wide/ && cp hf/model.safetensors hf_vocab/
sed 's/"n_embd": 64/"n_embd": 1099511627776/' hf/config.json > hf_wide/config.json
sed 's/"vocab_size": 50257/"vocab_size": 1000000000000/' hf/config.json > hf_vocab/config.json
expect_error "hf_wide/config.json: n_embd 1099511627776 is past what weft can hold (at most 2147483647)" runs/s -- train "${common[@]}" --model-dir hf_wide --out runs/s
expect_error "hf_vocab/config.json: vocab_size 1000000000000 is past what weft can hold" "" -- eval --model-dir hf_vocab --data data/tinyshakespeare_val.bin
# A model one process cannot hold: eval, sample and export refuse it before reading a weight.
mkdir hf_deep && cp hf/model.safetensors hf_deep/
sed 's/"n_layer": 2/"n_layer": 2000000/' hf/config.json > hf_deep/config.json
expect_error "the model of hf_deep needs about" "" -- eval --model-dir hf_deep --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 8
expect_error "of fp32 weights), but the node has" "" -- sample --model-dir hf_deep --tokenizer-dir "$SRC/data" --tokens 1
expect_error "model 'llama-3-8b' needs about 119.7 GiB on this node's 1 rank(s)" runs/s -- train "${common[@]}" --model llama-3-8b --out runs/s
expect_error "or more ranks on more nodes to divide its state (--zero 1-3 over dp, --tp, --pp)" runs/s -- train "${common[@]}" --model llama-3-8b --out runs/s
ulimit -S -v "$vm_limit"
# Issue #31, input checks. A token file's header is checked, not guessed: a damaged magic is named
# as one, and headerless (nanoGPT) files are read only with --data-format raw.
cp data/tinyshakespeare_val.bin bad_magic.bin
printf '\x89' | dd of=bad_magic.bin bs=1 conv=notrunc status=none  # magic 20240521
expect_error "bad header magic 20240521, expected 20240520" runs/m -- train "${common[@]}" --data bad_magic.bin --out runs/m
tail -c +1025 data/tinyshakespeare_val.bin > raw.bin
expect_error "needs --data-format raw" "" -- eval --ckpt runs/ok --data raw.bin --batch-size 1 --seq-len 8
"$WEFT" eval --ckpt runs/ok --data raw.bin --data-format raw --batch-size 1 --seq-len 8 >/dev/null && ok "a nanoGPT file with --data-format raw" || bad "--data-format raw refused"
expect_error "starts with llm.c's header magic 20240520" "" -- eval --ckpt runs/ok --data data/tinyshakespeare_val.bin --data-format raw --batch-size 1 --seq-len 8
expect_error "--data-format must be llmc (llm.c's header" runs/m -- train "${common[@]}" --data-format nanogpt --out runs/m
# 0 where 0 stands for "not given" is refused like a negative; every float flag must be finite.
expect_error "--n-head: 0 is not allowed; expected at least 1" runs/z -- train "${common[@]}" --n-head 0 --out runs/z
expect_error "--n-layer: 0 is not allowed" runs/z -- train "${common[@]}" --n-layer 0 --out runs/z
expect_error "--micro-batch-size: -1 is not allowed" runs/z -- train "${common[@]}" --micro-batch-size -1 --out runs/z
expect_error "--nodes: 0 is not allowed" "" -- plan --model gpt2 --cluster local --global-batch 8 --nodes 0
expect_error "--lr: inf is not a finite number" runs/z -- train "${common[@]}" --lr inf --out runs/z
printf 'beta2 = nan\n' > nan.toml
expect_error "--beta2: nan is not a finite number" runs/z -- train --config nan.toml "${common[@]}" --out runs/z
expect_error "--top-p: -inf is not a finite number" "" -- sample --ckpt runs/ok --top-p -inf
# Weights that are not finite are refused as they are read, naming the file and the tensor.
mkdir hf_nan && cp hf/config.json hf/model.safetensors hf_nan/
printf '\x00\x00\xc0\x7f' | dd of=hf_nan/model.safetensors bs=1 conv=notrunc status=none \
  seek=$(($(stat -c %s hf/model.safetensors) - 4))
expect_error "model.safetensors: tensor 'transformer." runs/n -- train "${common[@]}" --model-dir hf_nan --out runs/n
expect_error "holds NaN at element" "" -- sample --model-dir hf_nan --tokenizer-dir "$SRC/data" --tokens 1
# Every output path is checked before the first step.
expect_error "--trace nodir/t.json: its directory nodir does not exist" runs/t -- train "${common[@]}" --trace nodir/t.json --out runs/t
expect_error "--out /proc/weft-run: cannot write in /proc" "" -- train "${common[@]}" --out /proc/weft-run
expect_error "--svg /proc/s.svg: cannot write in /proc" "" -- pipeline --pp 2 --svg /proc/s.svg
expect_error "--out odd.toml/hf: odd.toml is not a directory" "" -- export --ckpt runs/ok --out odd.toml/hf
expect_error "--to-hf odd.toml/hf: odd.toml is not a directory" "" -- ckpt convert runs/ok --to-hf odd.toml/hf
expect_error "--out odd.toml/d: odd.toml is not a directory" "" -- prepare --input "$SRC/data/tinyshakespeare.txt" --out odd.toml/d $T
# weft prepare refuses a file that is not UTF-8 text, naming the first bad byte.
printf 'hello\nw\xffrld\n' > latin.txt
expect_error "text file 'latin.txt' is not UTF-8 text: byte 0xff at offset 7 (line 2) is not valid UTF-8" d8 -- prepare --input latin.txt --out d8 $T
printf 'ELF\x00\x01' > nul.txt
expect_error "byte 0x00 at offset 3 (line 1) is a NUL" d8 -- prepare --input nul.txt --out d8 $T
finish
