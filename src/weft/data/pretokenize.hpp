#pragma once
// GPT-2's pre-tokenisation, written out by hand. encoder.py splits text with the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and std::regex has no \p{L}, so the alternatives are matched here in the same order over
// UTF-8 decoded code points. Letters, numbers and white space come from a table generated from
// the Python `regex` module itself (unicode_table.cpp, by scripts/gen_unicode_table.py), so the
// classes agree with the reference for every code point that module knows (Unicode 16). A code
// point assigned in a later Unicode version is treated as "other" until the table is regenerated.
// Bytes that are not valid UTF-8 (which encoder.py could not even read) each count as one
// "other" character, so any byte string is split and round-trips exactly.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace weft::data {

enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

// \p{L} -> kLetter, \p{N} -> kNumber, \s -> kSpace, anything else -> kOther.
CharClass char_class(uint32_t code_point);

// Byte offset one past the pre-token that starts at byte `begin` (< text.size()).
size_t pretoken_end(std::string_view text, size_t begin);

// All pre-tokens of `text`, in order; they concatenate back to `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

namespace detail {
struct UnicodeRange {
    uint32_t first, last;
    CharClass cls;
};
extern const CharClass kAsciiClass[128];
extern const UnicodeRange kUnicodeRanges[];
extern const size_t kUnicodeRangeCount;
}  // namespace detail

}  // namespace weft::data
