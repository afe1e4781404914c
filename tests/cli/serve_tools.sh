# `weft serve --tool-call-parser hermes`: tool_choice "auto" reads the model's own calls out of its
# text. A tiny model trained a few seconds on chats whose answers are a Hermes call writes one
# greedily; the server answers it as a call, whole and streamed alike, and as text without tools.
source "$(dirname "$0")/lib.sh"
for i in $(seq 300); do
  c=$([ $((i % 2)) = 0 ] && echo Rome || echo Paris)
  printf 'user: Weather in %s?\nassistant: Let me look.<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>\n\n' $c $c
done >calls.txt
"$WEFT" prepare --input calls.txt --out data --tokenizer-dir "$SRC/data" --val-tokens 1024 >/dev/null
"$WEFT" train --model tiny --data data/calls_train.bin --out run --steps 150 --batch-size 8 \
  --seq-len 64 --lr 3e-3 --warmup 10 >/dev/null 2>&1
expect_error "--tool-call-parser: xml not in {none,hermes}" "" -- serve --ckpt run --tool-call-parser xml
"$WEFT" serve --ckpt run --tokenizer-dir "$SRC/data" --port 0 --slots 2 --threads 2 \
  --tool-call-parser hermes >serve.out 2>serve.err &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do grep -q "http://" serve.out && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*" serve.out) || { cat serve.err; bad "no start line"; finish; exit 1; }
grep -q "tool calls: hermes" serve.out && ok "start line: $(tail -n 1 serve.out)" || bad "start line: $(cat serve.out)"
post() {
  curl -s --max-time 60 -H "Content-Type: application/json" -d "$1" "${@:2}" "$url/v1/chat/completions"
}
TOOLS='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
ASK='"messages":[{"role":"user","content":"Weather in Rome?"}],"max_tokens":60,"temperature":0'
whole=$(post '{'"$ASK,$TOOLS"'}')
msg=$(jq -c .choices[0].message <<<"$whole")
[ "$(jq -r .choices[0].finish_reason <<<"$whole")" = tool_calls ] &&
  [ "$(jq -r '.tool_calls[0].function.name + " " + .tool_calls[0].type + " " + (.tool_calls|length|tostring)' <<<"$msg")" = "get_weather function 1" ] &&
  jq -r '.tool_calls[0].function.arguments' <<<"$msg" | jq -e '.city | type == "string"' >/dev/null &&
  [[ "$(jq -r .content <<<"$msg")" == *"Let me look."* ]] \
  && ok "auto: the model's call read out: $msg" || bad "auto: $whole"
# Streamed: the content as it comes, the call in the last delta, the same call and content.
events=$(post '{'"$ASK,$TOOLS"',"stream":true}' -N | grep '^data: {' | sed 's/^data: //')
content=$(jq -rj '.choices[0].delta.content // ""' <<<"$events")
scall=$(jq -c 'select(.choices[0].delta.tool_calls) | .choices[0].delta.tool_calls[0].function' <<<"$events")
[ "$scall" = "$(jq -c .tool_calls[0].function <<<"$msg")" ] && [ "$content" = "$(jq -r .content <<<"$msg")" ] &&
  [ "$(jq -r 'select(.choices[0].finish_reason) | .choices[0].finish_reason' <<<"$events")" = tool_calls ] \
  && ok "auto streamed: content '$content', then $scall" || bad "auto streamed: $events"
# Without tools the same text is content; with "none" too.
plain=$(post '{'"$ASK"'}')
none=$(post '{'"$ASK,$TOOLS"',"tool_choice":"none"}')
[[ "$(jq -r .choices[0].message.content <<<"$plain")" == *"<tool_call>"* ]] &&
  [ "$(jq -c .choices[0].message <<<"$none")" = "$(jq -c .choices[0].message <<<"$plain")" ] \
  && ok "without tools, and with \"none\", the call is text" || bad "plain: $plain / none: $none"
kill -TERM $pid
wait $pid || bad "server: exit $?: $(cat serve.err)"
finish
