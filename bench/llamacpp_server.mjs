// llama.cpp behind OpenAI's completions route, through node-llama-cpp's prebuilt CPU library: the
// peer that `weft bench serve` times beside `weft serve` (bench/serving_llamacpp.sh), since
// llama.cpp's own server is not packaged here. Only what the benchmark sends is served:
//   node llamacpp_server.mjs <npm prefix holding node-llama-cpp> <model.gguf> <threads> <slots>
//        [tokens a slot holds, 1024]
// GET /v1/models; POST /v1/completions with "prompt" (text or token ids), "max_tokens",
// "temperature" (0: greedy, else llama.cpp's sampling at it), "stream" (server-sent events, a
// chunk a token, `stream_options.include_usage`, `data: [DONE]`), the end of text ignored as
// with "ignore_eos" (the benchmark's fixed lengths). Each request takes one of <slots>
// sequences of one llama.cpp context; node-llama-cpp evaluates the sequences that have work in
// one batch (llama.cpp's continuous batching), and a request waits while every slot is busy.
// Binds 127.0.0.1 on a free port, prints "llama.cpp server: ... http://127.0.0.1:PORT/v1" once
// it listens, and exits on SIGTERM or SIGINT.
import http from "node:http";
import { pathToFileURL } from "node:url";
import { basename } from "node:path";

const [prefix, modelPath, threadsArg, slotsArg, perSlotArg] = process.argv.slice(2);
if (!prefix || !modelPath || !threadsArg || !slotsArg) {
  console.error("usage: node llamacpp_server.mjs <npm prefix> <model.gguf> <threads> <slots> [tokens a slot]");
  process.exit(2);
}
const threads = Number(threadsArg), slots = Number(slotsArg), perSlot = Number(perSlotArg ?? 1024);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(`${prefix}/node_modules/node-llama-cpp/dist/index.js`).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  sequences: slots, contextSize: slots * perSlot, batchSize: 512, threads });
const name = basename(modelPath);
const free = Array.from({ length: slots }, () => context.getSequence());
const waiting = [];  // resolvers of requests waiting for a slot, first come first served

async function takeSlot() {
  if (free.length > 0) return free.pop();
  return new Promise((resolve) => waiting.push(resolve));
}
async function giveSlot(sequence) {
  await sequence.clearHistory();
  const next = waiting.shift();
  if (next) next(sequence);
  else free.push(sequence);
}

function fail(res, status, message) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ error: { message, type: "invalid_request_error" } }));
}

async function complete(res, body) {
  const tokens = Array.isArray(body.prompt) ? body.prompt.map(Number) : model.tokenize(String(body.prompt ?? ""));
  const maxTokens = Number(body.max_tokens ?? 16), temperature = Number(body.temperature ?? 1);
  if (tokens.length === 0 || !(maxTokens >= 1) || tokens.length + maxTokens > perSlot)
    return fail(res, 400, `a prompt of ${tokens.length} tokens and max_tokens ${maxTokens}: ` +
      `expected at least one of each, ${perSlot} in all`);
  const stream = body.stream === true, usage = body.stream_options?.include_usage === true;
  const id = `cmpl-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices, extra = {}) =>
    `data: ${JSON.stringify({ id, object: "text_completion", created, model: name, choices, ...extra })}\n\n`;
  let closed = false;
  res.on("close", () => { closed = true; });
  const sequence = await takeSlot();
  let text = "", generated = 0;
  try {
    if (stream) res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    for await (const token of sequence.evaluate(tokens, temperature > 0 ? { temperature } : {})) {
      // Special tokens as their text too. A token whose bytes are no whole UTF-8 character alone
      // (a barely trained model chooses such byte tokens often) detokenizes to nothing; it is
      // sent as U+FFFD, so that every token is a chunk the client times.
      const piece = model.detokenize([token], true) || "\uFFFD";
      text += piece;
      ++generated;
      if (stream && !closed) res.write(chunk([{ index: 0, text: piece, logprobs: null, finish_reason: null }]));
      if (generated >= maxTokens || closed) break;
    }
  } finally {
    await giveSlot(sequence);
  }
  const counts = { prompt_tokens: tokens.length, completion_tokens: generated,
    total_tokens: tokens.length + generated };
  if (!stream) {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ id, object: "text_completion", created, model: name,
      choices: [{ index: 0, text, logprobs: null, finish_reason: "length" }], usage: counts }));
  }
  if (closed) return;
  res.write(chunk([{ index: 0, text: "", logprobs: null, finish_reason: "length" }]));
  if (usage) res.write(chunk([], { usage: counts }));
  res.end("data: [DONE]\n\n");
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ object: "list", data: [{ id: name, object: "model", owned_by: "llama.cpp" }] }));
  }
  if (req.method !== "POST" || req.url !== "/v1/completions") return fail(res, 404, `no route ${req.method} ${req.url}`);
  let raw = "";
  req.on("data", (d) => { raw += d; });
  req.on("end", () => {
    let body;
    try { body = JSON.parse(raw); } catch { return fail(res, 400, "the body is not JSON"); }
    complete(res, body).catch((e) => {
      if (!res.headersSent) fail(res, 500, String(e));
      else res.end();
    });
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(`llama.cpp server: ${name}, ${threads} threads, ${slots} slots of ${perSlot} tokens, ` +
    `http://127.0.0.1:${server.address().port}/v1`);
});
async function stop() {
  server.close();
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
