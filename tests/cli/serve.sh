# `weft serve`: the OpenAI routes through curl, bad input as 4xx error objects while serving,
# batch invariance (alone, among others, as `weft sample`), and a SIGTERM drain that exits 0.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 2 \
  --batch-size 2 --seq-len 32 --peak-gflops 100 2>/dev/null
expect_error "--slots must be at least 1, got 0" "" -- serve --ckpt run --slots 0
expect_error "--kv-cache-gib must be positive, got -1" "" -- serve --ckpt run --kv-cache-gib -1
expect_error "--spec draft needs --draft DIR" "" -- serve --ckpt run --spec draft
expect_error "--draft nowhere is not a directory" "" -- serve --ckpt run --spec draft --draft nowhere
expect_error "--kv-cache-gib 1e-09 holds no KV cache block of 16 positions (expected at least 1.53e-05 GiB" "" -- serve --ckpt run --tokenizer-dir "$SRC/data" --kv-cache-gib 1e-9
KEY=test-key
# A server of small steps: prompts of more than 8 tokens are prefilled in chunks.
# Without GOMP_SPINCOUNT (lib.sh sets it), to see the server set it itself.
env -u GOMP_SPINCOUNT "$WEFT" serve --ckpt run --tokenizer-dir "$SRC/data" --port 0 --slots 4 \
  --batch-tokens 8 --kv-cache-gib 0.001 --api-key $KEY --threads 2 >serve.out 2>serve.err &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*" serve.out) || { cat serve.err; bad "no start line"; finish; exit 1; }
grep -q "weft serve: model run (gpt2" serve.out && ok "start line: $(cat serve.out)" || bad "start line: $(cat serve.out)"
# Its OpenMP threads spin briefly before they sleep (cli/omp_spin.hpp): the process set the
# variable and executed itself again, under the same pid.
if [ -z "${OMP_WAIT_POLICY:-}" ]; then
  tr '\0' '\n' </proc/$pid/environ | grep -qx GOMP_SPINCOUNT=1000 && ok "GOMP_SPINCOUNT=1000 set" \
    || bad "GOMP_SPINCOUNT not set: $(tr '\0' '\n' </proc/$pid/environ | grep OMP)"
fi
# post <route> <json body> [curl args...]: the body of the answer; the status in $WORK/status, or
# in $STATUS_FILE: a call run in the background gives /dev/null, or its end would overwrite the
# status a foreground call is being checked by (a 404 read as the stream's 200, once in CI).
post() {
  local route=$1 body=$2 answer
  shift 2
  answer=$(mktemp -p "$WORK")
  curl -s --max-time 60 -o "$answer" -w "%{http_code}" -H "Authorization: Bearer ${WRONG_KEY:-$KEY}" \
    -H "Content-Type: application/json" -d "$body" "$@" "$url/v1/$route" >"${STATUS_FILE:-status}"
  cat "$answer"
}

a=$(post completions '{"model":"run","prompt":"ROMEO:","max_tokens":12,"temperature":0}')
[ "$(jq -r '.choices[0].finish_reason + " " + (.usage.completion_tokens|tostring) + " " + .object' <<<"$a")" = "length 12 text_completion" ] \
  && ok "completion: $(jq -c .choices[0].text <<<"$a")" || bad "completion: $a"
want=$("$WEFT" sample --ckpt run --tokenizer-dir "$SRC/data" --prompt "ROMEO:" --tokens 12 --temperature 0)
[ "ROMEO:$(jq -r .choices[0].text <<<"$a")" = "$want" ] && ok "greedy text equals weft sample's" || bad "weft sample says $want; the server $a"
c=$(post chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":5,"temperature":0}')
[ "$(jq -r '.object + " " + .choices[0].message.role + " " + (.usage.prompt_tokens|tostring)' <<<"$c")" = "chat.completion assistant 7" ] \
  && ok "chat: $(jq -c .choices[0].message <<<"$c")" || bad "chat: $c"
s=$(post completions '{"prompt":"ROMEO:","max_tokens":12,"temperature":0,"stream":true}' -N)
[ "$(tail -n 1 <<<"$s")" = "data: [DONE]" ] && ok "stream ends with [DONE]" || bad "stream: $s"
text=$(grep '^data: {' <<<"$s" | sed 's/^data: //' | jq -rj '.choices[0].text')
[ "$text" = "$(jq -r .choices[0].text <<<"$a")" ] && ok "streamed text equals the whole answer" || bad "streamed '$text'"
grep -q '"usage":{"completion_tokens":12' <<<"$s" && ok "stream's last chunk has usage" || bad "no usage in stream"
cs=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true}' -N)
[ "$(grep -c '^data: {' <<<"$cs")" -ge 1 ] && grep -q '"delta":{"content":' <<<"$cs" && grep -q '"role":"assistant"' <<<"$cs" \
  && ok "chat stream of deltas" || bad "chat stream: $cs"
st=$(post completions '{"prompt":"ROMEO:","max_tokens":12,"temperature":0,"stop":"'"$(jq -r .choices[0].text <<<"$a" | cut -c3-4)"'"}')
[ "$(jq -r .choices[0].finish_reason <<<"$st")" = stop ] && [ "$(jq -r .choices[0].text <<<"$st")" = "$(jq -r .choices[0].text <<<"$a" | cut -c1-2)" ] \
  && ok "stop string ends the text before it" || bad "stop: $st"
neutral=$(post completions '{"prompt":"x","max_tokens":1,"n":1,"best_of":1,"frequency_penalty":0,"presence_penalty":0.0,"logit_bias":{},"echo":false,"suffix":null,"ignore_eos":true}')
[ "$(cat status)" = 200 ] && [ "$(jq '.choices | length' <<<"$neutral")" = 1 ] \
  && ok "fields it does not implement, at their neutral values, accepted" || bad "neutral fields: $neutral"
ids=$(post completions '{"prompt":[40,716],"max_tokens":2}')
[ "$(jq .usage.prompt_tokens <<<"$ids")" = 2 ] && ok "prompt as token ids" || bad "token ids: $ids"
m=$(curl -s --max-time 10 -H "Authorization: Bearer $KEY" "$url/v1/models")
[ "$(jq -r '.data[0].id' <<<"$m")" = run ] && ok "models lists run" || bad "models: $m"
[ "$(curl -s --max-time 10 "$url/health")" = '{"status":"ok"}' ] && ok "health" || bad "health"
# The listening socket queues 512 connections, not httplib's 5 (a burst of clients would wait 1 s
# for a retried handshake). `ss` shows a listening socket's queue size; iproute2 may be absent.
if command -v ss >/dev/null; then
  backlog=$(ss -ltnH "sport = :${url##*:}" | awk '{ print $3 }')
  [ "$backlog" = 512 ] && ok "listen backlog 512" || bad "listen backlog: '$backlog'"
fi

# Log-probabilities: the chosen tokens', and the N likeliest at each place; greedy's choice is
# the likeliest of them, with the same log-probability (chat lists them most likely first).
tl=$(post completions '{"prompt":"ROMEO:","max_tokens":6,"temperature":0,"logprobs":3}' | jq -c .choices[0].logprobs)
[ "$(jq '[.top_logprobs[] | length] == [3,3,3,3,3,3]' <<<"$tl")" = true ] &&
  [ "$(jq '[range(6) as $i | .top_logprobs[$i][.tokens[$i]] == .token_logprobs[$i] and ([.top_logprobs[$i][]] | max) == .token_logprobs[$i]] | all' <<<"$tl")" = true ] \
  && ok "completion logprobs 3: $(jq -c .top_logprobs[0] <<<"$tl")" || bad "completion top logprobs: $tl"
t0=$(post completions '{"prompt":"ROMEO:","max_tokens":2,"logprobs":0}' | jq -c .choices[0].logprobs)
[ "$(jq -c '[(.token_logprobs | length), .top_logprobs]' <<<"$t0")" = '[2,[null,null]]' ] \
  && ok "completion logprobs 0: the chosen tokens' only" || bad "logprobs 0: $t0"
ct=$(post chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4,"temperature":0,"logprobs":true,"top_logprobs":2}' | jq -c .choices[0].logprobs.content)
[ "$(jq '[.[] | (.top_logprobs | length) == 2 and .top_logprobs[0].token == .token and .top_logprobs[0].logprob == .logprob and .top_logprobs[1].logprob <= .logprob and (.bytes | length) > 0] | all' <<<"$ct")" = true ] \
  && ok "chat top_logprobs 2: $(jq -c .[0].top_logprobs <<<"$ct")" || bad "chat top logprobs: $ct"
# Penalties: greedy text that repeats itself repeats less, each generated id's logit lowered by
# its count (frequency) and once (presence) before the choice.
most() { jq '[.choices[0].logprobs.token_ids | group_by(.)[] | length] | max' <<<"$1"; }
plain=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0}')
pen=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"frequency_penalty":2,"presence_penalty":1}')
[ "$(most "$pen")" -lt "$(most "$plain")" ] &&
  [ "$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"frequency_penalty":2,"presence_penalty":1}' | jq -c .choices)" = "$(jq -c .choices <<<"$pen")" ] \
  && ok "penalties: a token at most $(most "$pen") times in 24, against $(most "$plain"); the same again" \
  || bad "penalties: $(jq -c .choices[0].text <<<"$pen") against $(jq -c .choices[0].text <<<"$plain")"
# vLLM's repetition_penalty: at 100 no id of the prompt or of the text so far comes again (their
# logits divided by 100, or multiplied where negative).
prompt_ids=$(post completions '{"prompt":"ROMEO:","max_tokens":0,"echo":true,"logprobs":0}' | jq -c .choices[0].logprobs.token_ids)
rep=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"repetition_penalty":100}')
rep15=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"repetition_penalty":1.5}')
[ "$(jq "[.choices[0].logprobs.token_ids | (length == (unique | length)), (. - $prompt_ids | length == 24)] | all" <<<"$rep")" = true ] &&
  [ "$(jq -c .choices <<<"$rep15")" != "$(jq -c .choices <<<"$plain")" ] \
  && ok "repetition_penalty 100: 24 ids, none twice, none of the prompt's $prompt_ids; 1.5 changes greedy's text" \
  || bad "repetition_penalty: $(jq -c .choices[0].logprobs.token_ids <<<"$rep") after $prompt_ids"

# JSON mode: greedy's 32 tokens begin an object (not the plain text's); with '{' and '}' (ids 90
# and 92) raised the text is the smallest object and ends with "stop", in a chat too; a stream
# sends the same text.
js=$(post completions '{"prompt":"ROMEO:","max_tokens":32,"temperature":0,"response_format":{"type":"json_object"}}')
jobj=$(post completions '{"prompt":"ROMEO:","max_tokens":32,"temperature":0,"logit_bias":{"90":50,"92":100},"response_format":{"type":"json_object"}}')
jchat=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32,"temperature":0,"logit_bias":{"90":50,"92":100},"response_format":{"type":"json_object"}}')
jstream=$(post completions '{"prompt":"ROMEO:","max_tokens":32,"temperature":0,"stream":true,"response_format":{"type":"json_object"}}' -N |
  grep '^data: {' | sed 's/^data: //' | jq -rj '.choices[0].text')
[[ "$(jq -r .choices[0].text <<<"$js")" =~ ^[[:space:]]*\{ ]] && [ "$(jq -r .choices[0].text <<<"$js")" != "$(jq -r .choices[0].text <<<"$plain" | cut -c1-40)" ] &&
  [ "$(jq -r '.choices[0].finish_reason' <<<"$jobj")" = stop ] && jq -r .choices[0].text <<<"$jobj" | jq -e 'type == "object"' >/dev/null &&
  [ "$(jq -r '.choices[0].finish_reason' <<<"$jchat")" = stop ] && jq -r .choices[0].message.content <<<"$jchat" | jq -e 'type == "object"' >/dev/null &&
  [ "$jstream" = "$(jq -r .choices[0].text <<<"$js")" ] \
  && ok "JSON mode: $(jq -c .choices[0].text <<<"$js"); with '{' and '}' raised, $(jq -c .choices[0].text <<<"$jobj") and in a chat $(jq -c .choices[0].message.content <<<"$jchat"), both 'stop'" \
  || bad "JSON mode: $js / $jobj / $jchat / stream '$jstream'"

# Structured outputs: a schema of a boolean and a number out of a list leaves the model only
# whitespace to choose beside them, so greedy ends with "stop" in an instance, keys in order.
jsch=$(post completions '{"prompt":"ROMEO:","max_tokens":200,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"flag","strict":true,"schema":{"type":"object","properties":{"flag":{"type":"boolean"},"n":{"enum":[1,2,30]}},"required":["flag","n"],"additionalProperties":false}}}}')
[ "$(jq -r .choices[0].finish_reason <<<"$jsch")" = stop ] &&
  jq -r .choices[0].text <<<"$jsch" | jq -e '(keys_unsorted == ["flag", "n"]) and (.flag | type == "boolean") and ([.n] | inside([1, 2, 30]))' >/dev/null \
  && ok "json_schema: $(jq -c .choices[0].text <<<"$jsch"), an instance" || bad "json_schema: $jsch"

# Tool calls: "required" among two functions writes one whole call ("tool_calls"), whose
# arguments are an instance of the function named, whole and streamed alike; content given as
# text parts is the text; a conversation that carries the call and its result renders.
TOOLS='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"celsius":{"type":"boolean"}},"required":["city","celsius"]}}},{"type":"function","function":{"name":"stop_now"}}]'
req=$(post chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":80,"temperature":0,'"$TOOLS"',"tool_choice":"required"}')
reqs=$(post chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":80,"temperature":0,"stream":true,'"$TOOLS"',"tool_choice":"required"}' -N |
  grep '^data: {' | sed 's/^data: //' | jq -c 'select(.choices[0].delta.tool_calls) | .choices[0].delta.tool_calls[0].function')
call=$(jq -c '.choices[0].message.tool_calls[0].function' <<<"$req")
[ "$(jq -r '.choices[0].finish_reason + " " + (.choices[0].message.content|tostring)' <<<"$req")" = "tool_calls null" ] &&
  { [ "$(jq -r .name <<<"$call")" = stop_now ] && [ "$(jq -r .arguments <<<"$call")" = "{}" ] ||
    { [ "$(jq -r .name <<<"$call")" = get_weather ] &&
      jq -r .arguments <<<"$call" | jq -e '(keys_unsorted == ["city", "celsius"]) and (.celsius | type == "boolean") and ([.city] | inside(["Paris", "Rome"]))' >/dev/null; }; } &&
  [ "$reqs" = "$call" ] \
  && ok "tool_choice required: $call, streamed whole alike" || bad "tool_choice required: $req / stream $reqs"
# A stop string that cuts the call leaves text, not a call: finish "stop", the text as content.
rcut=$(post chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":80,"temperature":0,'"$TOOLS"',"tool_choice":"required","stop":"arguments"}')
[ "$(jq -r '.choices[0].finish_reason + " " + (.choices[0].message.tool_calls|tostring)' <<<"$rcut")" = "stop null" ] &&
  [[ "$(jq -r .choices[0].message.content <<<"$rcut")" == '{"name":'* ]] \
  && ok "a call cut by a stop string: $(jq -c .choices[0].message.content <<<"$rcut") as content" || bad "cut call: $rcut"
parts=$(post chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}],"max_tokens":5,"temperature":0}')
conv=$(post chat/completions '{"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\",\"celsius\":true}"}}]},{"role":"tool","tool_call_id":"c1","content":"21"}],"max_tokens":1,'"$TOOLS"',"tool_choice":"none"}')
[ "$(jq -c .choices[0].message <<<"$parts")" = "$(jq -c .choices[0].message <<<"$c")" ] &&
  [ "$(jq -r .usage.prompt_tokens <<<"$conv")" -gt 20 ] \
  && ok "text parts are their text; a call and its result render ($(jq .usage.prompt_tokens <<<"$conv") prompt tokens)" \
  || bad "content parts: $parts / conversation: $conv"

# logit_bias: greedy's first token at -100 is never chosen; a token at +100 always is; the
# log-probabilities stay the model's.
first=$(jq '.choices[0].logprobs.token_ids[0]' <<<"$plain")
nb=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"logit_bias":{"'"$first"'":-100}}')
pb=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0.9,"logprobs":true,"logit_bias":{"464":100}}')
[ "$(jq "[.choices[0].logprobs.token_ids[] | select(. == $first)] | length" <<<"$nb")" = 0 ] &&
  [ "$(jq -c '[.choices[0].logprobs.content[].token_id] | unique' <<<"$pb")" = "[464]" ] &&
  [ "$(jq '[.choices[0].logprobs.content[].logprob < -1] | all' <<<"$pb")" = true ] \
  && ok "logit_bias: token $first at -100 never chosen, 464 at +100 six times in six, at the model's logprob" \
  || bad "logit_bias: $nb / $pb"

# Batch invariance: one request's tokens and logprobs alone and among 5 others (some of them
# prefilling long prompts in chunks while it decodes), and a chunked prompt as `weft sample`.
lp='{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":3,"presence_penalty":0.5,"logit_bias":{"11":4}}'
alone=$(post completions "$lp" | jq -c .choices)
long="$(printf 'To be, or not to be, that is the question. %.0s' {1..3})"
for i in 1 2 3 4 5; do
  STATUS_FILE=/dev/null post completions \
    '{"prompt":"'"$long"' '"$i"'","max_tokens":20,"temperature":0.8,"seed":'"$i"'}' >/dev/null &
done
among=$(post completions "$lp" | jq -c .choices)
wait_others() { for j in $(jobs -p); do [ "$j" = "$pid" ] || wait "$j"; done; }
wait_others
[ "$alone" = "$among" ] && ok "tokens and logprobs alone = among 5 others" || bad "batch variance: $alone vs $among"
chunked=$(post completions '{"prompt":"'"$long"'","max_tokens":8,"temperature":0}' | jq -r .choices[0].text)
want=$("$WEFT" sample --ckpt run --tokenizer-dir "$SRC/data" --prompt "$long" --tokens 8 --temperature 0)
[ "$long$chunked" = "$want" ] && ok "prompt prefilled in chunks of 8 = weft sample's" || bad "chunked: '$chunked' vs '$want'"

# Several choices: `n` of a prompt, and a batch of prompts; each choice draws from streams of its
# own (choice 0's are the single request's), streamed under its index.
one=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7}')
three=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7,"n":3}')
[ "$(jq -c '[.choices[].index]' <<<"$three")" = "[0,1,2]" ] &&
  [ "$(jq .choices[0] <<<"$three")" = "$(jq .choices[0] <<<"$one")" ] &&
  [ "$(jq '[.choices[].text] | unique | length' <<<"$three")" = 3 ] &&
  [ "$(jq -c '[.usage.prompt_tokens, .usage.completion_tokens]' <<<"$three")" = "[$(jq .usage.prompt_tokens <<<"$one"),24]" ] \
  && ok "n 3: choice 0 the single answer, three texts, usage $(jq -c .usage <<<"$three")" || bad "n 3: $three against $one"
# best_of: the three choices of n 3 run, the n whose tokens' log-probabilities sum highest are
# returned, highest first, and the usage counts all three.
b3=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7,"n":3,"logprobs":0}')
want=$(jq -c '[.choices[] | {text, s: (.logprobs.token_logprobs | add)}] | sort_by(-.s) | map(.text)' <<<"$b3")
best1=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7,"best_of":3}')
best2=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7,"best_of":3,"n":2}')
[ "$(jq -c '[.choices[].text]' <<<"$best1")" = "$(jq -c '.[:1]' <<<"$want")" ] &&
  [ "$(jq -c '[.choices[].text]' <<<"$best2")" = "$(jq -c '.[:2]' <<<"$want")" ] &&
  [ "$(jq -c '[.choices[].index]' <<<"$best2")" = "[0,1]" ] &&
  [ "$(jq -c .usage <<<"$best1")" = "$(jq -c .usage <<<"$three")" ] \
  && ok "best_of 3: the likeliest 1 and 2 of n 3's choices (by sum: $(jq -c "[.choices[].logprobs.token_logprobs | add]" <<<"$b3")), usage of all three" \
  || bad "best_of: $best1 / $best2 against $want"
sn=$(post completions '{"prompt":"ROMEO:","max_tokens":8,"temperature":0.9,"seed":7,"n":2,"stream":true}' -N)
sn_text() { grep '^data: {' <<<"$sn" | sed 's/^data: //' | jq -rj "select(.choices[0].index == $1) | .choices[0].text"; }
[ "$(sn_text 0)" = "$(jq -r .choices[0].text <<<"$three")" ] && [ "$(sn_text 1)" = "$(jq -r .choices[1].text <<<"$three")" ] &&
  [ "$(tail -n 1 <<<"$sn")" = "data: [DONE]" ] && [ "$(grep -c '"usage"' <<<"$sn")" = 1 ] \
  && ok "n 2 streamed: each index's deltas are its choice, one [DONE], one usage" || bad "n 2 stream: $sn"
two=$(post completions '{"prompt":["ROMEO:",[40,716]],"max_tokens":8,"temperature":0.9,"seed":7}')
alone2=$(post completions '{"prompt":[40,716],"max_tokens":8,"temperature":0.9,"seed":7}')
[ "$(jq .choices[0] <<<"$two")" = "$(jq .choices[0] <<<"$one")" ] && [ "$(jq '.choices | length' <<<"$two")" = 2 ] &&
  [ "$(jq -c '.choices[1] | del(.index)' <<<"$two")" = "$(jq -c '.choices[0] | del(.index)' <<<"$alone2")" ] \
  && ok "a batch of two prompts: two choices, each its prompt's single answer" || bad "batch of prompts: $two against $one and $alone2"
# Echo with logprobs, the shape lm-eval's loglikelihood reads (a batch of token-id prompts,
# max_tokens 1): the prompt's tokens scored in chunks of 8 have the log-probabilities, bit for
# bit, and the alternatives that one-token decode steps gave the same tokens; each token's
# text_offset is the bytes of those before it.
g=$(post completions '{"prompt":[464,2068,7586],"max_tokens":13,"temperature":0,"logprobs":2,"ignore_eos":true}' | jq -c .choices[0].logprobs)
score=$(jq -c '{prompt: [[464,2068,7586] + .token_ids[:12]], max_tokens: 1, temperature: 0, logprobs: 2, echo: true}' <<<"$g")
e=$(post completions "$score" | jq -c .choices[0].logprobs)
[ "$(jq -c '.token_ids' <<<"$e")" = "$(jq -c '[464,2068,7586] + .token_ids' <<<"$g")" ] &&
  [ "$(jq -c '[.token_logprobs[0], .top_logprobs[0]]' <<<"$e")" = "[null,null]" ] &&
  [ "$(jq -c '.token_logprobs[3:]' <<<"$e")" = "$(jq -c .token_logprobs <<<"$g")" ] &&
  [ "$(jq -c '.top_logprobs[3:]' <<<"$e")" = "$(jq -c .top_logprobs <<<"$g")" ] &&
  [ "$(jq '[.token_logprobs[1:3][] | . < 0] | all' <<<"$e")" = true ] &&
  [ "$(jq '.text_offset == ([0] + [foreach .tokens[] as $t (0; . + ($t | utf8bytelength))][:-1])' <<<"$e")" = true ] \
  && ok "echo: 15 prompt tokens scored as the decode steps scored them: $(jq -c '.token_logprobs[:4]' <<<"$e")" \
  || bad "echo logprobs: $e against generated $g"
es=$(post completions "$(jq -c '. + {stream: true}' <<<"$score")" -N)
[ "$(grep '^data: {' <<<"$es" | sed 's/^data: //' | jq -c '.choices[0].logprobs.token_logprobs[]' | jq -sc .)" = "$(jq -c .token_logprobs <<<"$e")" ] \
  && ok "echo streamed: the same log-probabilities" || bad "echo stream: $es"
# lm-eval's loglikelihood is the loss `weft eval` computes through the training forward: the mean
# negative score of a held-out window's 64 tokens after its first equals it (to 1e-5).
ids=$(od -An -tu2 -j1024 -N130 -v data/tinyshakespeare_val.bin | tr -s ' \n' ' ' | sed 's/^ //;s/ $//;s/ /,/g')
loss=$("$WEFT" eval --ckpt run --data data/tinyshakespeare_val.bin --batch-size 1 --seq-len 64 --batches 1 --json | jq .loss)
nll=$(post completions '{"prompt":['"$ids"'],"max_tokens":1,"logprobs":0,"echo":true}' | jq '.choices[0].logprobs.token_logprobs[1:65] | map(-.) | add / length')
[ "$(jq -n "($nll - $loss) | fabs < 1e-5")" = true ] && ok "echo scores: mean $nll over 64 held-out tokens, weft eval's loss $loss" \
  || bad "echo scores average $nll, weft eval's loss $loss"
z=$(post completions "$(jq -c '. + {max_tokens: 0}' <<<"$score")")
[ "$(jq -c '.choices[0].logprobs.token_logprobs' <<<"$z")" = "$(jq -c '.token_logprobs[:15]' <<<"$e")" ] &&
  [ "$(jq -r '.choices[0].finish_reason + " " + (.usage.completion_tokens | tostring)' <<<"$z")" = "length 0" ] \
  && ok "echo with max_tokens 0: the prompt's scores alone" || bad "max_tokens 0: $z"
plain3=$(post completions '{"prompt":"ROMEO:","max_tokens":3,"temperature":0}' | jq -r .choices[0].text)
[ "$(post completions '{"prompt":"ROMEO:","max_tokens":3,"temperature":0,"echo":true}' | jq -r .choices[0].text)" = "ROMEO:$plain3" ] \
  && ok "echo without logprobs: the prompt's text, then the answer" || bad "echo text"

# Bad input: a 4xx with an error object each, and the server goes on serving.
expect_api_error() {  # <status> <code> <route> <body> [curl args...]
  local status=$1 code=$2 route=$3 body=$4
  shift 4
  local e
  e=$(post "$route" "$body" "$@")
  if [ "$(cat status)" = "$status" ] && [ "$(jq -r .error.code <<<"$e")" = "$code" ] &&
     [ "$(jq -r '.error.message|length > 10' <<<"$e")" = true ]; then
    ok "$status $code: $(jq -r .error.message <<<"$e")"
  else
    bad "expected $status $code for $body; got $(cat status) $e"
  fi
}
STATUS_FILE=/dev/null post completions '{"prompt":"ROMEO:","max_tokens":150,"stream":true}' -N \
  >during.txt &
during=$!
expect_api_error 400 invalid_json completions '{"prompt": "x",'
expect_api_error 400 invalid_type completions '{"prompt":"x","max_tokens":"ten"}'
expect_api_error 400 invalid_type chat/completions '{"messages":"hi"}'
expect_api_error 404 model_not_found completions '{"model":"gpt-4","prompt":"x"}'
expect_api_error 400 context_length_exceeded completions '{"prompt":"x","max_tokens":1000}'
expect_api_error 400 invalid_value completions '{"prompt":""}'
expect_api_error 400 invalid_value completions '{"prompt":[1,50257]}'
expect_api_error 400 invalid_value completions '{"prompt":"x","top_p":0}'
expect_api_error 400 invalid_value completions '{"prompt":"x","logprobs":21}'
expect_api_error 400 invalid_value completions '{"prompt":"x","max_tokens":0,"echo":true}'
expect_api_error 400 invalid_value completions '{"prompt":"x","n":0}'
expect_api_error 400 invalid_value completions '{"prompt":["x","y"],"n":65}'
expect_api_error 400 invalid_type completions '{"prompt":[[1,2],"x",3]}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}}}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","response_format":{"type":"json_schema"}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","response_format":{"type":"xml"}}'
expect_api_error 400 invalid_type completions '{"prompt":"x","response_format":"json_object"}'
T1='"tools":[{"type":"function","function":{"name":"f"}}]'
expect_api_error 400 unsupported_parameter chat/completions '{"messages":[{"role":"user","content":"x"}],'"$T1"'}'
expect_api_error 400 unsupported_parameter chat/completions '{"messages":[{"role":"user","content":"x"}],'"$T1"',"tool_choice":"auto"}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],'"$T1"',"tool_choice":{"type":"function","function":{"name":"g"}}}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":0}}}}}],"tool_choice":"none"}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],'"$T1"',"tool_choice":"required","response_format":{"type":"json_object"}}'
expect_api_error 400 unsupported_parameter completions '{"prompt":"x",'"$T1"'}'
expect_api_error 400 unsupported_content chat/completions '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'
expect_api_error 400 invalid_type chat/completions '{"messages":[{"role":"tool","content":"x"}]}'
expect_api_error 400 invalid_value completions '{"prompt":"x","ignore_eos":true,"response_format":{"type":"json_object"}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","logit_bias":{"abc":1}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","logit_bias":{"50257":1}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","logit_bias":{"5":101}}'
expect_api_error 400 invalid_type completions '{"prompt":"x","logit_bias":{"5":"up"}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","logit_bias":{"5":1,"05":2}}'
expect_api_error 400 invalid_value completions '{"prompt":"x","frequency_penalty":3}'
expect_api_error 400 invalid_value completions '{"prompt":"x","repetition_penalty":0}'
expect_api_error 400 invalid_value completions '{"prompt":"x","n":3,"best_of":2}'
expect_api_error 400 invalid_value completions '{"prompt":"x","best_of":3,"stream":true}'
expect_api_error 400 unsupported_parameter chat/completions '{"messages":[{"role":"user","content":"x"}],"best_of":2}'
expect_api_error 400 invalid_type completions '{"prompt":"x","repetition_penalty":"high"}'
expect_api_error 400 unsupported_parameter chat/completions '{"messages":[{"role":"user","content":"x"}],"echo":true}'
expect_api_error 400 invalid_type completions '{"prompt":"x","ignore_eos":"yes"}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}'
expect_api_error 400 invalid_value chat/completions '{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":-1}'
WRONG_KEY=wrong expect_api_error 401 invalid_api_key completions '{"prompt":"x"}'
head -c 1200000 /dev/zero | tr '\0' ' ' >big.json
expect_api_error 413 request_too_large completions @big.json
expect_api_error 404 not_found models/nothing '{}'
wait $during
grep -q '^data: \[DONE\]' during.txt && ok "a stream ran to its end through the bad input" || bad "stream during bad input: $(tail -c 200 during.txt)"
again=$(post completions "$lp" | jq -c .choices)
[ "$again" = "$alone" ] && ok "still serving, same answer" || bad "after bad input: $again"

# A client that leaves mid-stream: its request is dropped and its blocks freed (/metrics back to
# zero below) long before its 240 tokens.
curl -s -N --max-time 0.3 -H "Authorization: Bearer $KEY" \
  -d '{"prompt":"ROMEO:","max_tokens":240,"temperature":0.9,"stream":true}' "$url/v1/completions" >/dev/null || true
for _ in $(seq 50); do curl -s --max-time 10 "$url/metrics" | grep -q '^weft_requests_running 0$' && break; sleep 0.1; done
met=$(curl -s --max-time 10 "$url/metrics")
grep -q '^weft_requests_running 0$' <<<"$met" && grep -q '^weft_kv_blocks_used 0$' <<<"$met" &&
  [ "$(grep '^weft_generation_tokens_total' <<<"$met" | cut -d' ' -f2)" -gt 100 ] &&
  [ "$(grep '^weft_time_to_first_token_seconds_count' <<<"$met" | cut -d' ' -f2)" = "$(grep '^weft_requests_finished_total' <<<"$met" | cut -d' ' -f2)" ] &&
  grep -q '^weft_time_per_output_token_seconds_bucket{le="+Inf"} [1-9]' <<<"$met" &&
  grep -q '^weft_preemptions_total 0$' <<<"$met" && grep -q '^weft_prefix_cache_hit_tokens_total [0-9]' <<<"$met" \
  && ok "metrics: $(grep -v '^#\|_bucket' <<<"$met" | tr '\n' ' ')" || bad "metrics: $met"

# The official openai npm client, installed once into a cache directory; skipped, and said so,
# only when npm cannot reach its registry and the package is not there yet.
npm_dir=${XDG_CACHE_HOME:-$HOME/.cache}/weft/npm-openai
if [ ! -d "$npm_dir/node_modules/openai" ]; then
  mkdir -p "$npm_dir"
  timeout 180 npm install --silent --no-audit --no-fund --prefix "$npm_dir" openai@4 >npm.log 2>&1 || true
fi
if [ -d "$npm_dir/node_modules/openai" ]; then
  got=$(timeout 60 node "$SRC/tests/cli/openai_client.js" "$npm_dir/node_modules/openai" "$url/v1" $KEY 2>&1) || true
  text=$(jq -r .choices[0].text <<<"$a")
  chat=$(jq -r .choices[0].message.content <<<"$c")
  if [ "$(jq -r .text <<<"$got")" = "$text" ] && [ "$(jq -r .streamed <<<"$got")" = "$text" ] &&
     [ "$(jq -r .chat <<<"$got")" = "$chat" ] && [ "$(jq -r .chat_streamed <<<"$got")" = "$chat" ] &&
     [ "$(jq -r .total_tokens <<<"$got")" = 15 ] && [ "$(jq -c .top <<<"$got")" = '[2,2,2]' ] &&
     [ "$(jq -c .error <<<"$got")" = '{"status":404,"code":"model_not_found"}' ] &&
     [ "$(jq -c .choices <<<"$got")" = '[0,1]' ] && [ "$(jq -c .echo <<<"$got")" = "[true,null,$(( $(jq .usage.prompt_tokens <<<"$a") + 1 ))]" ] &&
     [ "$(jq -c .json <<<"$got")" = '["object","stop"]' ] &&
     [ "$(jq -c .tool <<<"$got")" = '["get_weather",["city","celsius"],"stop",true,"assistant"]' ]; then
    ok "openai npm client: completions and chat, whole and streamed, top_logprobs, n 2, echo, JSON mode, a tool call, and a 404"
  else
    bad "openai npm client: $got"
  fi
else
  echo "SKIPPED: the openai npm client (npm could not install it: $(tail -n 1 npm.log))"
fi

# SIGTERM: the stream in flight is answered whole, then the server exits 0.
STATUS_FILE=/dev/null post completions '{"prompt":"ROMEO:","max_tokens":200,"stream":true}' -N \
  >drain.txt &
client=$!
sleep 0.5
kill -TERM $pid
rc=0
timeout 60 tail --pid=$pid -f /dev/null || rc=$?
wait $pid || rc=$?
wait $client || true
[ "$rc" = 0 ] && ok "SIGTERM: exit 0" || bad "SIGTERM: exit $rc: $(cat serve.err)"
tail -n 1 drain.txt | grep -q '^$' && grep -q '^data: \[DONE\]' drain.txt && ok "in-flight stream drained" || bad "drain: $(tail -c 300 drain.txt)"

# --spec draft, the model as its own draft: the greedy text is the first server's, every guess kept.
"$WEFT" serve --ckpt run --tokenizer-dir "$SRC/data" --port 0 --kv-cache-gib 0.001 --api-key $KEY \
  --threads 2 --spec draft --draft run --spec-tokens 3 >draft.out 2>draft.err &
pid=$!
for _ in $(seq 600); do grep -q "http://" draft.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*" draft.out) || { cat draft.err; bad "no start line with a draft"; finish; exit 1; }
d=$(post completions '{"prompt":"ROMEO:","max_tokens":12,"temperature":0}')
[ "$(jq -r .choices[0].text <<<"$d")" = "$(jq -r .choices[0].text <<<"$a")" ] && ok "--spec draft: greedy text as without" || bad "--spec draft: $d, without: $a"
metrics=$(curl -s --max-time 10 "$url/metrics")
g=$(awk '/^weft_spec_guessed_tokens_total/ { print $2 }' <<<"$metrics")
k=$(awk '/^weft_spec_accepted_tokens_total/ { print $2 }' <<<"$metrics")
[ "${g:-0}" -gt 0 ] && [ "$g" = "$k" ] && ok "--spec draft: $k of $g guesses kept" || bad "--spec draft metrics: $g guessed, $k kept"
# Penalties and biases (the draft proposes without them, so some guesses fail): the same answer.
dpen=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"frequency_penalty":2,"presence_penalty":1}')
dnb=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"logit_bias":{"'"$first"'":-100}}')
drep=$(post completions '{"prompt":"ROMEO:","max_tokens":24,"temperature":0,"logprobs":0,"repetition_penalty":1.5}')
djs=$(post completions '{"prompt":"ROMEO:","max_tokens":32,"temperature":0,"response_format":{"type":"json_object"}}')
[ "$(jq -c .choices <<<"$dpen")" = "$(jq -c .choices <<<"$pen")" ] && [ "$(jq -c .choices <<<"$dnb")" = "$(jq -c .choices <<<"$nb")" ] &&
  [ "$(jq -c .choices <<<"$drep")" = "$(jq -c .choices <<<"$rep15")" ] && [ "$(jq -c .choices <<<"$djs")" = "$(jq -c .choices <<<"$js")" ] \
  && ok "--spec draft: penalties, repetition_penalty, logit_bias and JSON mode give the tokens and logprobs of the server without" \
  || bad "--spec draft with penalties: $dpen / $dnb"
# A "required" call (each verify row masked by the function its path names) is the same call.
dreq=$(post chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":80,"temperature":0,'"$TOOLS"',"tool_choice":"required"}')
[ "$(jq -c '.choices[0] | [.finish_reason, .message.tool_calls[0].function]' <<<"$dreq")" = "$(jq -c '.choices[0] | [.finish_reason, .message.tool_calls[0].function]' <<<"$req")" ] \
  && ok "--spec draft: tool_choice required gives the call of the server without" || bad "--spec draft required: $dreq / $req"
kill -TERM $pid
wait $pid || bad "--spec draft server: exit $?: $(cat draft.err)"
finish
