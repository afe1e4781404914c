# `weft serve`'s chat template: the model's own (tokenizer_config.json's chat_template, rendered
# by weft's Jinja subset) reaches the model as exactly the text it renders; a template that
# refuses a conversation is a 400 naming its message; one outside the subset is said at start and
# the family default serves instead.
source "$(dirname "$0")/lib.sh"
prepare_data
"$WEFT" train --model tiny --data data/tinyshakespeare_train.bin --out run --steps 1 \
  --batch-size 2 --seq-len 32 --peak-gflops 100 2>/dev/null
pid=
trap '[ -z "$pid" ] || kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT

# serve_with <chat_template>: a server of the tiny model whose tokenizer (the test Qwen2 one) has
# that template beside it; sets $url and $pid, its output in serve.out and serve.err.
serve_with() {
  rm -rf tok && mkdir tok && cp "$SRC/tests/data/tokenizers/qwen2/tokenizer.json" tok/
  jq -n --arg t "$1" '{bos_token: "<s>", eos_token: "<|im_end|>", chat_template: $t}' >tok/tokenizer_config.json
  "$WEFT" serve --ckpt run --tokenizer tok --port 0 --threads 2 --kv-cache-gib 0.001 >serve.out 2>serve.err &
  pid=$!
  for _ in $(seq 300); do grep -q "chat template:" serve.out && break; sleep 0.1; done
  url=$(grep -o "http://[0-9.:]*" serve.out) || { cat serve.err; bad "no start line"; finish; exit 1; }
}
stop_server() { kill -TERM $pid; wait $pid || bad "exit $? after SIGTERM"; pid=; }
post() {  # <route> <json body>: the answer; its status in ./status
  curl -s --max-time 60 -o answer.json -w "%{http_code}" -H "Content-Type: application/json" \
    -d "$2" "$url/v1/$1" >status
  cat answer.json
}

# Qwen2-Instruct's template (Qwen/Qwen2-0.5B-Instruct's tokenizer_config.json).
serve_with "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
grep -q "chat template: model's, tok/tokenizer_config.json" serve.out && ok "start line: $(tail -n 1 serve.out)" \
  || bad "start line: $(cat serve.out)"
c=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0}')
want=$'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'
p=$(post completions "$(jq -n --arg p "$want" '{prompt: $p, max_tokens: 6, temperature: 0}')")
# The two special tokens a turn are one id each: 5 + 4 + 3 text tokens would differ otherwise.
if [ "$(jq .usage.prompt_tokens <<<"$c")" = "$(jq .usage.prompt_tokens <<<"$p")" ] &&
   [ "$(jq -r .choices[0].message.content <<<"$c")" = "$(jq -r .choices[0].text <<<"$p")" ]; then
  ok "chat prompt = Qwen2's rendered text: $(jq .usage.prompt_tokens <<<"$c") tokens, same greedy text"
else
  bad "chat $c vs completion of the rendered text $p"
fi
stop_server

# Mixtral-Instruct's template refuses a system turn with its own message.
serve_with "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
e=$(post chat/completions '{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}],"max_tokens":2}')
[ "$(cat status)" = 400 ] && [ "$(jq -r .error.message <<<"$e")" = "the model's chat template refuses these messages: Conversation roles must alternate user/assistant/user/assistant/..." ] \
  && ok "400: $(jq -r .error.message <<<"$e")" || bad "raise_exception: $(cat status) $e"
c=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0}')
p=$(post completions '{"prompt":"<s>[INST] Hi [/INST]","max_tokens":2,"temperature":0}')
[ "$(jq .usage.prompt_tokens <<<"$c")" = "$(jq .usage.prompt_tokens <<<"$p")" ] \
  && ok "Mixtral's template with bos_token from tokenizer_config.json" || bad "mixtral: $c vs $p"
stop_server

# Outside the subset (a macro): a warning at start naming it, and the family default (GPT-2's
# family: the simple template) serves.
serve_with "{% macro turn(m) %}{{ m.content }}{% endmacro %}{% for m in messages %}{{ turn(m) }}{% endfor %}"
grep -q "warning: tok/tokenizer_config.json: weft cannot render the chat_template (it is outside weft's Jinja subset: line 1: the statement '{% macro %}' is not in weft's chat template subset); rendering the family default, simple, instead" serve.err \
  && ok "warning: $(cat serve.err)" || bad "no warning: $(cat serve.err)"
grep -q "chat template: family default, simple (weft cannot render the model's)" serve.out \
  && ok "$(tail -n 1 serve.out)" || bad "start line: $(cat serve.out)"
c=$(post chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0}')
p=$(post completions '{"prompt":"user: Hi\nassistant:","max_tokens":2,"temperature":0}')
[ "$(jq .usage.prompt_tokens <<<"$c")" = "$(jq .usage.prompt_tokens <<<"$p")" ] \
  && ok "the simple template reaches the model" || bad "simple: $c vs $p"
stop_server
finish
