#pragma once
// A tokenizer read from a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Llama 3,
// Qwen2, SmolLM ship one), giving the ids Hugging Face's encode(text, add_special_tokens=False)
// gives.
//
// Read: model BPE (vocab; merges as "a b" strings or ["a", "b"] pairs; ignore_merges), added
// tokens, normalizer null or NFC, pre_tokenizer ByteLevel (last), Split with GPT-2's, Llama 3's or
// Qwen2's regex (recognised by its text, run by pretokenize.hpp's matchers) and behavior
// Isolated, Digits, and Sequences of these; decoder ByteLevel. Anything else (WordPiece,
// Unigram, Metaspace, another regex, BPE dropout...) is refused naming the file and the value:
// ids that silently differ from the reference would be worse than no tokenizer.
//
// Added tokens, special or not, are found in the text first, leftmost and then longest, and
// become their ids, as Hugging Face does; encode_ordinary finds none. The end-of-text token is
// the eos_token of a tokenizer_config.json beside the file, else the added token named
// "<|endoftext|>", "<|end_of_text|>" or "</s>".
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/data/tokenizer.hpp"

namespace weft::data {

// A special token's name in a tokenizer_config.json `config` (read from `path`): `key`
// ("bos_token", "eos_token") as a string or {"content": name, ...}; "" when absent or null.
std::string configured_token(const nlohmann::json& config, const char* key,
                             const std::filesystem::path& path);

// A tokenizer.json's vocabulary as a GGUF file's "gpt2" tokenizer holds it for llama.cpp
// (convert_hf_to_gguf.py's fields), checked as HfTokenizer::load checks the file.
struct HfSpelling {
    // Tokens in id order as model.vocab spells them (GPT-2's byte alphabet), added tokens as
    // their content; an id nothing gives is "[PAD<id>]". Merges "left right", best first.
    std::vector<std::string> tokens, merges;
    // llama_token_type: 1 normal, 3 control (a special added token), 4 user-defined (another
    // added token), 5 unused (a pad).
    std::vector<int32_t> types;
    int32_t bos = -1;  // tokenizer_config.json's bos_token; -1: none
    int32_t eos = -1;  // the end-of-text token (HfTokenizer's eot)
    // llama.cpp's name of the pre-tokenizer (tokenizer.ggml.pre): "gpt-2" (GPT-2's regex),
    // "llama-bpe" (Llama 3's), "qwen2" (Qwen2's), "smollm" (single digits, then GPT-2's).
    std::string pre;
};
// `path`: a tokenizer.json or a directory holding one. A pre-tokenizer llama.cpp has no name for
// (another Digits or ByteLevel setting) is an error naming it.
HfSpelling read_hf_spelling(const std::filesystem::path& path);

class HfTokenizer final : public Tokenizer {
  public:
    static HfTokenizer load(const std::filesystem::path& tokenizer_json);

    std::vector<int32_t> encode(std::string_view text) const override;
    std::vector<int32_t> encode_ordinary(std::string_view text) const override;
    // With an NFC normalizer the bytes are those of the text after normalisation.
    std::string decode(std::span<const int32_t> tokens) const override;
    std::string decode_token(int32_t token) const override;
    int32_t eot() const override;
    int32_t vocab_size() const override;

    HfTokenizer(HfTokenizer&&) noexcept;
    HfTokenizer& operator=(HfTokenizer&&) noexcept;
    ~HfTokenizer() override;

    struct Impl;

  private:
    explicit HfTokenizer(std::unique_ptr<Impl> impl);
    void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
    const std::string& token_bytes(int32_t token) const;

    std::unique_ptr<Impl> impl_;
};

}  // namespace weft::data
