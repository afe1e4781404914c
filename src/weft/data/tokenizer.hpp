#pragma once
// GPT-2's byte-level BPE, token for token what OpenAI's encoder.py produces: the text is split by
// GPT-2's pre-tokenisation regex (pretokenize.hpp), each piece's UTF-8 bytes are merged by the
// ranks of vocab.bpe, and the merged byte strings are looked up in encoder.json.
//
// Internally tokens are raw byte strings: encoder.json and vocab.bpe spell bytes through
// encoder.py's byte -> printable-character table, which is undone once at load.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace weft::data {

class Gpt2Tokenizer {
  public:
    static Gpt2Tokenizer load(const std::filesystem::path& encoder_json,
                              const std::filesystem::path& vocab_bpe);

    // "<|endoftext|>" in the text becomes the end-of-text token, as tiktoken's
    // encode(allowed_special="all") does; the text between is encoded with encode_ordinary.
    std::vector<int32_t> encode(std::string_view text) const;
    // encoder.py's encode: "<|endoftext|>" is ordinary text. Used by prepare_dataset, so that the
    // only end-of-text tokens in a token file are the ones it puts between documents.
    std::vector<int32_t> encode_ordinary(std::string_view text) const;

    // The bytes of the tokens, concatenated; an id outside [0, vocab_size) is an error.
    std::string decode(std::span<const int32_t> tokens) const;
    // One token's bytes: may be part of a UTF-8 sequence.
    std::string decode_token(int32_t token) const;

    int32_t eot() const { return eot_; }                                         // 50256 for GPT-2
    int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }  // 50257

    Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
    Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
    ~Gpt2Tokenizer();

  private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    struct Cache;

    Gpt2Tokenizer();
    // Appends the tokens of one pre-token (its raw bytes) to `out`.
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    void merge(std::vector<int32_t>& word) const;
    const std::string& token_bytes(int32_t token) const;

    std::vector<std::string> tokens_;             // id -> bytes
    int32_t byte_token_[256] = {};                // byte -> the id of that one byte
    std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
    int32_t eot_ = -1;
    std::unique_ptr<Cache> cache_;  // pre-token bytes -> tokens
};

}  // namespace weft::data
