// The official `openai` npm client against `weft serve` (tests/cli/serve.sh): completions and
// chat, whole and streamed, chat's top log-probabilities, two chat choices, a completion's echo
// with log-probabilities, a chat in JSON mode, a forced tool call answered by the tool, and an
// error it must surface. Prints one JSON line of what it got.
// node openai_client.js <openai package dir> <base URL> <API key>
const OpenAI = require(process.argv[2]);
const client = new OpenAI({ baseURL: process.argv[3], apiKey: process.argv[4], maxRetries: 0 });
const base = { model: 'run', temperature: 0 };
(async () => {
  const whole = await client.completions.create({ ...base, prompt: 'ROMEO:', max_tokens: 12 });
  let streamed = '';
  const s = await client.completions.create({ ...base, prompt: 'ROMEO:', max_tokens: 12, stream: true });
  for await (const chunk of s) streamed += chunk.choices[0].text;
  const messages = [{ role: 'user', content: 'Hello' }];
  const chat = await client.chat.completions.create({ ...base, messages, max_tokens: 5 });
  let chatStreamed = '';
  const cs = await client.chat.completions.create({ ...base, messages, max_tokens: 5, stream: true });
  for await (const chunk of cs) chatStreamed += chunk.choices[0].delta.content || '';
  const lp = await client.chat.completions.create({
    ...base, messages, max_tokens: 3, logprobs: true, top_logprobs: 2,
  });
  const top = lp.choices[0].logprobs.content.map((c) => c.top_logprobs.length);
  const two = await client.chat.completions.create({
    ...base, messages, max_tokens: 3, temperature: 0.9, seed: 7, n: 2,
  });
  const choices = two.choices.map((c) => c.index);
  const echo = await client.completions.create({
    ...base, prompt: 'ROMEO:', max_tokens: 1, echo: true, logprobs: 1,
  });
  const echoed = echo.choices[0].logprobs.token_logprobs;
  // JSON mode through the client's own field, '{' and '}' (GPT-2's ids 90, 92) raised so that it closes.
  const jsonChat = await client.chat.completions.create({
    ...base, messages, max_tokens: 16, response_format: { type: 'json_object' },
    logit_bias: { 90: 50, 92: 100 },
  });
  const json = JSON.parse(jsonChat.choices[0].message.content);
  // A forced call of a function (its arguments under the function's schema), whole and
  // streamed, then the conversation that answers it sent back as the client shapes it.
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: {
        type: 'object',
        properties: { city: { enum: ['Paris', 'Rome'] }, celsius: { type: 'boolean' } },
        required: ['city', 'celsius'],
      },
    },
  }];
  const forced = { ...base, messages, max_tokens: 60, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
  const call = await client.chat.completions.create(forced);
  const called = call.choices[0].message.tool_calls[0];
  let streamedArgs = '';
  for await (const chunk of await client.chat.completions.create({ ...forced, stream: true }))
    for (const t of chunk.choices[0].delta.tool_calls || []) streamedArgs += t.function.arguments || '';
  const answered = await client.chat.completions.create({
    ...base, max_tokens: 2, tools, tool_choice: 'none',
    messages: [...messages, call.choices[0].message,
      { role: 'tool', tool_call_id: called.id, content: '21 C' }],
  });
  let error = {};
  try {
    await client.completions.create({ ...base, model: 'gpt-4', prompt: 'x' });
  } catch (e) {
    error = { status: e.status, code: e.code };
  }
  console.log(JSON.stringify({
    text: whole.choices[0].text, streamed, total_tokens: whole.usage.total_tokens,
    chat: chat.choices[0].message.content, chat_streamed: chatStreamed, top, error, choices,
    echo: [echo.choices[0].text.startsWith('ROMEO:'), echoed[0], echoed.length],
    json: [typeof json, jsonChat.choices[0].finish_reason],
    tool: [called.function.name, Object.keys(JSON.parse(called.function.arguments)),
      call.choices[0].finish_reason, streamedArgs === called.function.arguments,
      answered.choices[0].message.role],
  }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
