#pragma once
// HfTokenizer's state: hf_tokenizer_load.cpp reads tokenizer.json into it, hf_tokenizer.cpp runs
// it. Not for use outside those two files.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/data/bpe.hpp"
#include "weft/data/hf_tokenizer.hpp"

namespace weft::data {

// The pre-tokenisation regexes read from tokenizer.json, each run by its own matcher.
enum class HfSplitRegex : uint8_t { kGpt2, kLlama3, kQwen2 };

// One pre-tokenizer of the pipeline; a Sequence is flattened into its members.
struct HfPreTokenizer {
    enum class Kind : uint8_t { kSplit, kDigits, kByteLevel };
    Kind kind = Kind::kByteLevel;
    HfSplitRegex regex = HfSplitRegex::kGpt2;  // kSplit
    bool individual_digits = false;            // kDigits
    bool add_prefix_space = false;             // kByteLevel: " " before a piece without one
    bool use_regex = true;                     // kByteLevel: then split it by GPT-2's regex
};

// Lets a pre-token's string_view look up a std::string key without a copy.
struct HfStringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct HfTokenizer::Impl {
    struct AddedToken {
        std::string content;
        int32_t id;
    };

    BpeModel bpe;
    // ignore_merges: a pre-token that is a token of the model's vocabulary is that token.
    bool ignore_merges = false;
    // bytes -> id, filled if ignore_merges
    std::unordered_map<std::string, int32_t, HfStringHash, std::equal_to<>> model_ids;
    bool nfc = false;                            // normalizer NFC
    std::vector<HfPreTokenizer> pre_tokenizers;  // ByteLevel last
    // Added tokens by their first byte, each list longest first: a text is searched only where
    // one may start.
    std::array<std::vector<AddedToken>, 256> added_by_first_byte;
    std::vector<std::string> tokens;  // id -> bytes
    std::vector<bool> has_token;      // false for an id nothing in the file gives
    int32_t eot = -1;
};

}  // namespace weft::data
