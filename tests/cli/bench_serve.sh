# `weft bench serve` against `weft serve` on the tiny model: every request answered, the output
# counts are the server's usage, latencies consistent (TTFT <= end to end, p50 <= p99), the JSON
# complete; and bad input refused before any request.
source "$(dirname "$0")/lib.sh"
expect_error "--requests must be at least 1, got 0" out.json -- bench serve --url http://127.0.0.1:9 --requests 0 --prompt-len 8 --output-len 8 --json out.json
expect_error "--rate must be positive requests/s or inf (all at once), got '0'" out.json -- bench serve --url http://127.0.0.1:9 --requests 8 --rate 0 --prompt-len 8 --output-len 8 --json out.json
expect_error "--rate must be positive requests/s or inf (all at once), got '-2'" "" -- bench serve --url http://127.0.0.1:9 --requests 8 --rate -2 --prompt-len 8 --output-len 8
expect_error "--url '127.0.0.1:8080' is not http://HOST:PORT" "" -- bench serve --url 127.0.0.1:8080 --requests 8 --prompt-len 8 --output-len 8
expect_error "--url 'http://127.0.0.1' is not http://HOST:PORT" "" -- bench serve --url http://127.0.0.1 --requests 8 --prompt-len 8 --output-len 8
expect_error "--temperature: Value 3 not in range 0.000000 to 2.000000" "" -- bench serve --url http://127.0.0.1:9 --requests 8 --prompt-len 8 --output-len 8 --temperature 3
expect_error "--json" "" -- bench serve --url http://127.0.0.1:9 --requests 8 --prompt-len 8 --output-len 8 --json no/such/dir/out.json
# Port 9 (discard) has no listener on a test machine: the server cannot be reached.
expect_error "cannot reach --url http://127.0.0.1:9" out.json -- bench serve --url http://127.0.0.1:9 --requests 8 --prompt-len 8 --output-len 8 --json out.json

prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 2 \
  --batch-size 2 --seq-len 32 --peak-gflops 100 2>/dev/null >/dev/null
"$WEFT" serve --ckpt run --tokenizer-dir "$SRC/data" --port 0 --slots 8 --api-key k --threads 2 \
  >serve.out 2>serve.err &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*/v1" serve.out) || { cat serve.err; bad "no start line"; finish; exit 1; }

expect_error "refused the API key" out.json -- bench serve --url "$url" --api-key wrong --requests 8 --prompt-len 8 --output-len 8 --json out.json
timeout 60 "$WEFT" bench serve --url "$url" --api-key k --requests 8 --rate 20 --prompt-len 8 --output-len 8 \
  --ttft-slo-ms 10000 --tpot-slo-ms 10000 --json out.json >table.txt 2>err.txt \
  && ok "bench serve ran: $(grep -E 'throughput|Median TTFT' table.txt | tr -s ' ' | tr '\n' ';')" \
  || bad "bench serve failed: $(cat err.txt)"
j() { jq -r "$1" out.json; }
[ "$(j .successful_requests) $(j .failed_requests)" = "8 0" ] && ok "8 successful, 0 failed" || bad "counts: $(j '[.successful_requests,.failed_requests,.errors]|tostring')"
[ "$(j '[.per_request[].output_tokens]|add')" = "$(j .total_output_tokens)" ] && [ "$(j .total_output_tokens)" -ge 8 ] &&
  [ "$(j '[.per_request[].prompt_tokens]|all(. == 8)')" = true ] \
  && ok "output tokens from usage sum to $(j .total_output_tokens); 8 prompt tokens each" || bad "token counts: $(j '.per_request|tostring')"
[ "$(j '[.per_request[]|.ttft_ms > 0 and .ttft_ms <= .e2e_ms]|all')" = true ] && ok "TTFT <= end to end, each request" || bad "ttft vs e2e: $(j '.per_request|tostring')"
[ "$(j '[.ttft_ms, .tpot_ms, .itl_ms, .e2e_ms]|all(.median <= .p99 and .mean > 0)')" = true ] \
  && ok "p50 <= p99 for TTFT, TPOT, ITL, e2e" || bad "percentiles: $(j '[.ttft_ms,.tpot_ms,.itl_ms]|tostring')"
[ "$(j '[has("duration_s","request_throughput","output_throughput","total_token_throughput","goodput","model")]|all')" = true ] &&
  [ "$(j .goodput)" = "$(j .request_throughput)" ] && [ "$(j .model)" = run ] \
  && ok "JSON fields present, goodput = throughput under loose SLOs" || bad "JSON: $(head -c 400 out.json)"
grep -q "Successful requests: *8" table.txt && grep -q "P99 ITL (ms):" table.txt && ok "table" || bad "table: $(cat table.txt)"
# An SLO no request can meet: goodput 0, and the rate inf path (all at once).
"$WEFT" bench serve --url "$url" --api-key k --requests 4 --rate inf --prompt-len 8 --output-len 4 \
  --ttft-slo-ms 0.001 --json tight.json >/dev/null 2>&1
[ "$(jq -r '.goodput' tight.json)" = 0 ] && [ "$(jq -r .rate tight.json)" = inf ] && ok "goodput 0 under a 1 us TTFT limit" || bad "tight: $(head -c 300 tight.json)"
# Text prompts: 8 words, about 8 tokens by the server's count; sampled.
"$WEFT" bench serve --url "$url" --api-key k --requests 2 --text-prompt --prompt-len 8 --output-len 2 \
  --temperature 0.8 --json text.json >/dev/null 2>&1
[ "$(jq -r '"\(.prompt_kind) \(.temperature)"' text.json) $(jq .successful_requests text.json)" = "text 0.8 2" ] &&
  [ "$(jq '[.per_request[].prompt_tokens]|all(. >= 8 and . <= 16)' text.json)" = true ] \
  && ok "--text-prompt: $(jq -c '[.per_request[].prompt_tokens]' text.json) prompt tokens" || bad "text prompt: $(head -c 400 text.json)"
# One in flight: each request is sent after the one before it has ended.
"$WEFT" bench serve --url "$url" --api-key k --requests 4 --max-concurrency 1 --prompt-len 8 --output-len 4 \
  --json one.json >/dev/null 2>&1
[ "$(jq '[.per_request[]|{s: .start_ms, e: (.start_ms + .e2e_ms)}] as $r | [range(1; 4)|$r[.].s >= $r[.-1].e]|all' one.json)" = true ] &&
  [ "$(jq .successful_requests one.json)" = 4 ] \
  && ok "--max-concurrency 1: no two requests overlap" || bad "max-concurrency 1: $(jq -c .per_request one.json)"
kill -TERM $pid
wait $pid || true
finish
