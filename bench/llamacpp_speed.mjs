// llama.cpp's prompt and decode speed on a GGUF, through node-llama-cpp's prebuilt CPU library,
// the other side of bench/serving_llamacpp.sh:
//   node llamacpp_speed.mjs <npm prefix holding node-llama-cpp> <model.gguf> <prompt len> <tokens> <threads>
// Prints one JSON line: prompt tokens/s (one batch of <prompt len> token ids, best of 3) and
// decode tokens/s (greedy, after an 8-token prompt, <tokens> generated one at a time, best of 3).
// llama.cpp's defaults otherwise (F16 K/V cache): what its users run.
import { pathToFileURL } from "node:url";

const [prefix, modelPath, promptArg, tokensArg, threadsArg] = process.argv.slice(2);
const promptLen = Number(promptArg), generate = Number(tokensArg), threads = Number(threadsArg);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(`${prefix}/node_modules/node-llama-cpp/dist/index.js`).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  contextSize: promptLen + generate + 16, batchSize: promptLen, threads });
const sequence = context.getSequence();
// Token ids 1000-1999, as `weft bench serve` sends.
const ids = (n, seed) => Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + seed * 104729) % 1000));

let prompt = 0, decode = 0;
for (let round = 0; round < 3; ++round) {
  await sequence.clearHistory();
  let t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(ids(promptLen, round));
  prompt = Math.max(prompt, promptLen / ((performance.now() - t0) / 1000));

  await sequence.clearHistory();
  let n = 0;
  t0 = 0;
  // The clock starts at the first generated token: what follows is decode alone.
  for await (const token of sequence.evaluate(ids(8, round), { temperature: 0 })) {
    void token;
    if (n === 0) t0 = performance.now();
    if (++n > generate) break;
  }
  decode = Math.max(decode, generate / ((performance.now() - t0) / 1000));
}
console.log(JSON.stringify({ model: modelPath, threads, prompt_tokens_per_s: prompt,
  decode_tokens_per_s: decode, prompt_len: promptLen, generated: generate }));
await context.dispose();
await model.dispose();
await llama.dispose();
