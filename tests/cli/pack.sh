# Document boundaries and packing from the command line: `weft prepare` writes each token file's
# document index (its header and the count it reports), or one for an existing file from its
# end-of-text tokens (--index-of); --synthetic writes a long-tailed corpus whose lengths follow
# the stated distribution; `weft train --pack documents` trains on either; and each bad input is
# one clear error with nothing written.
source "$(dirname "$0")/lib.sh"
prepare_data

# The index header: "weftdocs", version 1, the tokens of its file, the documents.
idx_header() { od -An -t d8 -j 8 -N 24 "$1" | xargs; }
[ "$(head -c 8 data/tinyshakespeare_train.idx)" = weftdocs ] && ok "train index written" ||
  bad "no train index"
read -r version tokens docs <<<"$(idx_header data/tinyshakespeare_train.idx)"
[ "$version $tokens" = "1 305260" ] && [ "$docs" -gt 6000 ] &&
  ok "train index: version 1, 305260 tokens, $docs documents" || bad "index header: $version $tokens $docs"

# An index made afterwards from the end-of-text tokens of a file (as for llm.c's or nanoGPT's):
# the bundled corpus's documents each begin with one, so it is the index prepare wrote.
cp data/tinyshakespeare_train.bin old.bin
out=$("$WEFT" prepare --index-of old.bin)
cmp -s old.idx data/tinyshakespeare_train.idx && ok "--index-of: $out" || bad "--index-of: $out"
cp data/tinyshakespeare_train.bin raw.bin
expect_error "--eot must be a token id (0 or more), got -1" raw.idx -- prepare --index-of raw.bin --eot -1
expect_error "--eot requires --index-of" "" -- prepare --eot 7

# A synthetic corpus: 400 documents of median 40 tokens, capped at 600.
out=$("$WEFT" prepare --synthetic 400 --lengths lognormal:40:1.0 --max-doc-len 600 --val-tokens 2000 --out syn)
grep -q "syn/synthetic_train.bin: .* tokens, .* documents" <<<"$out" && ok "synthetic: $out" || bad "synthetic output: $out"
read -r _ total ndocs <<<"$(idx_header syn/synthetic_train.idx)"
read -r _ vtotal vdocs <<<"$(idx_header syn/synthetic_val.idx)"
# A lognormal of median 40 and sigma 1 has mean 40 e^0.5 = 66: 400 of them ~26,000 tokens.
all=$((total + vtotal))
[ "$all" -gt 18000 ] && [ "$all" -lt 36000 ] && ok "synthetic: $all tokens in all" || bad "synthetic: $all tokens"
again=$("$WEFT" prepare --synthetic 400 --lengths lognormal:40:1.0 --max-doc-len 600 --val-tokens 2000 --out syn2)
cmp -s syn/synthetic_train.bin syn2/synthetic_train.bin && ok "synthetic: the same for the same seed" ||
  bad "synthetic: two runs differ"

common=(--model tiny --batch-size 4 --seq-len 64 --steps 2 --threads 1 --peak-gflops 100 --eval-batches 1)
"$WEFT" train "${common[@]}" --data syn/synthetic_train.bin --pack documents --out runs/syn >syn.log 2>&1 &&
  grep -q '"step":2' runs/syn/metrics.jsonl && ok "trains --pack documents on the synthetic corpus" ||
  { bad "training on the synthetic corpus"; cat syn.log; }
grep -q '"pack":"documents"' runs/syn/metrics.jsonl && grep -q "packing documents: 375 in 26757 tokens" syn.log &&
  ok "the run says it packs 375 documents" || bad "no packing in the start line or log: $(head -c 600 syn.log)"
"$WEFT" train "${common[@]}" --data data/tinyshakespeare_train.bin --pack documents --out runs/ts >ts.log 2>&1 &&
  ok "trains --pack documents on the bundled corpus" || { bad "training on the bundled corpus"; cat ts.log; }

cp data/tinyshakespeare_train.bin bare.bin
expect_error "--pack documents: token file 'bare.bin' has no document index 'bare.idx'" runs/x -- \
  train "${common[@]}" --data bare.bin --pack documents --out runs/x
"$WEFT" train "${common[@]}" --data bare.bin --pack none --out runs/bare >bare.log 2>&1 &&
  ok "a token file without an index trains with --pack none" || { bad "--pack none without an index"; cat bare.log; }
expect_error "--pack must be none or documents, got 'docs'" runs/x -- \
  train "${common[@]}" --data bare.bin --pack docs --out runs/x
expect_error "--lengths 'zipf:1:2': expected lognormal:MEDIAN:SIGMA or pareto:MIN:ALPHA" s3 -- \
  prepare --synthetic 10 --lengths zipf:1:2 --out s3
expect_error "--lengths 'pareto:0:1': expected" s3 -- prepare --synthetic 10 --lengths pareto:0:1 --out s3
expect_error "--lengths requires --synthetic" s3 -- prepare --lengths pareto:2:1 --out s3
finish
