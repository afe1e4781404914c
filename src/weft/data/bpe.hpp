#pragma once
// The part of byte-level BPE that GPT-2's encoder.py and Hugging Face's BPE model share: the
// byte -> printable-character alphabet both spell tokens in, and the merge loop that turns one
// pre-token's bytes into token ids. The two front-ends (Gpt2Tokenizer, HfTokenizer) differ in how
// they read their files and split text into pre-tokens, never in what happens to a pre-token.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace weft::data {

// A token spelled in encoder.py's bytes_to_unicode alphabet (UTF-8 text, as encoder.json,
// vocab.bpe and tokenizer.json hold them) -> its raw bytes; nullopt when a character is outside
// the alphabet (Hugging Face then takes the spelling's own UTF-8 bytes, for added tokens).
std::optional<std::string> byte_level_unspell(std::string_view spelled);

class BpeModel {
  public:
    BpeModel();
    BpeModel(BpeModel&&) noexcept;
    BpeModel& operator=(BpeModel&&) noexcept;
    ~BpeModel();

    // Every word starts as one token per byte, so all 256 must be set before encode().
    void set_byte_token(uint8_t byte, int32_t token) { byte_token_[byte] = token; }
    // The next merge, ranked after every one added before it: the adjacent pair (left, right)
    // becomes `result`. False (and nothing changes) when the pair already has a merge.
    bool add_merge(int32_t left, int32_t right, int32_t result);
    size_t merge_count() const { return merges_.size(); }

    // Appends the tokens of one pre-token (its raw bytes) to `out`. Thread-safe.
    void encode(std::string_view piece, std::vector<int32_t>& out) const;

  private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    struct Cache;

    void merge(std::vector<int32_t>& word) const;

    int32_t byte_token_[256] = {};
    std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
    std::unique_ptr<Cache> cache_;                // pre-token bytes -> tokens
};

}  // namespace weft::data
