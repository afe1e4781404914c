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

// One character of UTF-8 text. Strict: overlongs, surrogates and code points past U+10FFFF are
// invalid, and then the character is the one byte at `pos` (code_point holds its value).
struct Utf8Char {
    uint32_t code_point;
    uint32_t length;  // bytes
    bool valid;
};
Utf8Char decode_utf8(std::string_view s, size_t pos);

// \p{L} -> kLetter, \p{N} -> kNumber, \s -> kSpace, anything else -> kOther.
CharClass char_class(uint32_t code_point);

// Byte offset one past the pre-token that starts at byte `begin` (< text.size()).
size_t pretoken_end(std::string_view text, size_t begin);

// Llama 3's pre-tokenisation regex, in Hugging Face's tokenizer.json (Qwen2's is the same with
// `\p{N}` for `\p{N}{1,3}`: max_digits 1):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// matched the same way over the same classes. The reference runs it with Oniguruma, whose (?i)
// folds case by Unicode's rules, so `'s` also matches an apostrophe and U+017F (long s).
size_t pretoken_end_llama3(std::string_view text, size_t begin, int max_digits);

// Hugging Face's Digits pre-tokenizer: one number character (\p{N}, Rust's char::is_numeric),
// or with `individual` false a run of them; otherwise the run up to the next number.
size_t pretoken_end_digits(std::string_view text, size_t begin, bool individual);

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
