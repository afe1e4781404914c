// The official `openai` npm client against `weft serve` (tests/cli/serve.sh): completions and
// chat, whole and streamed, chat's top log-probabilities, two chat choices, a completion's echo
// with log-probabilities, a chat in JSON mode, and an error it must surface. Prints one JSON line of what it got.
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
  }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
