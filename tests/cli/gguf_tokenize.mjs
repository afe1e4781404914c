// llama.cpp's tokenizer of GGUF files, through node-llama-cpp's prebuilt library:
//   node gguf_tokenize.mjs <npm prefix holding node-llama-cpp> <text file> <model.gguf>...
// prints one line per model: {"model": path, "ids": the text's token ids (no BOS, special
// tokens' names as text), "text": those ids detokenized, "bos" and "eos": its
// begin- and end-of-sequence tokens}.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [prefix, textFile, ...models] = process.argv.slice(2);
const text = readFileSync(textFile, "utf8");
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(`${prefix}/node_modules/node-llama-cpp/dist/index.js`).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
for (const modelPath of models) {
  // The vocabulary alone: no weights are read.
  const model = await llama.loadModel({ modelPath, vocabOnly: true });
  const ids = model.tokenize(text, false);
  const back = model.detokenize(ids, false);
  console.log(JSON.stringify({ model: modelPath, ids, text: back, bos: model.tokens.bos,
    eos: model.tokens.eos }));
  await model.dispose();
}
await llama.dispose();
