// llama.cpp's mean next-token loss of a token sequence under GGUF models, through node-llama-cpp's
// prebuilt library (no download, no compile):
//   node gguf_eval.mjs <npm prefix holding node-llama-cpp> <token ids, comma-separated> <model.gguf>...
// prints one line per model: {"model": path, "loss": mean over positions of
// -log p(token[i+1] | token[0..i]), "tokens": n}.
import { pathToFileURL } from "node:url";

const [prefix, ids, ...models] = process.argv.slice(2);
const tokens = ids.split(",").map(Number);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(`${prefix}/node_modules/node-llama-cpp/dist/index.js`).href);

// gpu false and build "never": the CPU library the npm package ships, or an error.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
for (const modelPath of models) {
  const model = await llama.loadModel({ modelPath });
  // The K/V cache in F32 (llama.cpp's default is F16), so that an F32 model is compared in fp32
  // throughout; flash attention off for the same reason.
  const context = await model.createContext({
    contextSize: Math.max(64, tokens.length),
    batchSize: tokens.length,
    flashAttention: false,
    threads: 2,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  // Every logit of each position, the log-softmax taken here in double precision.
  const input = tokens.slice(0, -1).map((t) => [t, { generateNext: { logits: true } }]);
  const out = await sequence.controlledEvaluate(input);
  let sum = 0;
  for (let i = 0; i < input.length; ++i) {
    const { logits } = out[i].next;
    let max = -Infinity;
    for (const v of logits.values()) max = Math.max(max, v);
    let z = 0;
    for (const v of logits.values()) z += Math.exp(v - max);
    sum += max + Math.log(z) - logits.get(tokens[i + 1]);
  }
  console.log(JSON.stringify({ model: modelPath, loss: sum / input.length, tokens: input.length }));
  await context.dispose();
  await model.dispose();
}
await llama.dispose();
