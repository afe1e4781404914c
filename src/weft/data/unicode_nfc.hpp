#pragma once
// Unicode Normalization Form C (UAX #15), which Qwen2's tokenizer.json asks for before its text is
// split: canonical decomposition, canonical ordering of combining marks, canonical composition.
// The data is generated from Python's unicodedata (unicode_nfc_table.cpp, by
// scripts/gen_nfc_table.py); a character newer than that Unicode version is left as it is.
// Bytes that are not UTF-8 are kept as they are and block composition across them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::data {

// True when the text is certainly NFC already (it has no character that NFC could change or
// combine): the common case, a scan with no allocation.
bool is_nfc_quick(std::string_view utf8);

// The text in NFC.
std::string to_nfc(std::string_view utf8);

namespace detail {
struct NfcRange {
    char32_t first, last;
    uint8_t value;
};
struct NfcDecomposition {
    char32_t code_point;
    uint16_t offset, length;  // into kDecomposedChars
};
struct NfcComposition {
    char32_t first, second, composite;
};
extern const NfcRange kCombiningClass[];
extern const size_t kCombiningClassCount;
extern const NfcRange kMaybeChanges[];
extern const size_t kMaybeChangesCount;
extern const NfcDecomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const char32_t kDecomposedChars[];
extern const NfcComposition kCompositions[];
extern const size_t kCompositionCount;
}  // namespace detail

}  // namespace weft::data
