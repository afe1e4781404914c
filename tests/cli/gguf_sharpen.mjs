// Multiplies every q_proj and k_proj weight (and bias, Qwen2) of a float32 safetensors file by a
// factor, in place: queries and keys grow by it and attention scores by its square, so that position (the rotary layout and scaling) carries
// much of a briefly trained model's loss.
//   node gguf_sharpen.mjs <model.safetensors> <factor>
import { readFileSync, writeFileSync } from "node:fs";

const [file, factor] = [process.argv[2], Number(process.argv[3])];
const bytes = readFileSync(file);
const headerLength = Number(bytes.readBigUInt64LE(0));
const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString("utf8"));
const data = 8 + headerLength;
let scaled = 0;
for (const [name, t] of Object.entries(header)) {
  if (!/\.(q|k)_proj\.(weight|bias)$/.test(name)) continue;
  if (t.dtype !== "F32") throw new Error(`${name}: dtype ${t.dtype}, expected F32`);
  for (let at = data + t.data_offsets[0]; at < data + t.data_offsets[1]; at += 4)
    bytes.writeFloatLE(bytes.readFloatLE(at) * factor, at);
  ++scaled;
}
if (scaled === 0) throw new Error(`${file}: no q_proj or k_proj weights`);
writeFileSync(file, bytes);
