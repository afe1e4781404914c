#include "weft/data/unicode_nfc.hpp"

#include <algorithm>
#include <vector>

#include "weft/data/pretokenize.hpp"

namespace weft::data {

namespace {

// Hangul syllables, composed and decomposed by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

// A byte that is not UTF-8 travels as this plus its value: class 0, composes with nothing.
constexpr char32_t kRawByte = 0x110000;

uint8_t range_value(const detail::NfcRange* ranges, size_t count, char32_t cp) {
    const detail::NfcRange* end = ranges + count;
    auto it = std::upper_bound(ranges, end, cp,
                               [](char32_t c, const detail::NfcRange& r) { return c < r.first; });
    if (it == ranges) return 0;
    --it;
    return cp <= it->last ? it->value : 0;
}

uint8_t combining_class(char32_t cp) {
    if (cp < 0x300 || cp >= kRawByte) return 0;
    return range_value(detail::kCombiningClass, detail::kCombiningClassCount, cp);
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const char32_t s = cp - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
        return;
    }
    const detail::NfcDecomposition* end = detail::kDecompositions + detail::kDecompositionCount;
    auto it = std::lower_bound(
        detail::kDecompositions, end, cp,
        [](const detail::NfcDecomposition& d, char32_t c) { return d.code_point < c; });
    if (it == end || it->code_point != cp) {
        out.push_back(cp);
        return;
    }
    out.insert(out.end(), detail::kDecomposedChars + it->offset,
               detail::kDecomposedChars + it->offset + it->length);
}

// The primary composite of the pair, or 0.
char32_t compose(char32_t first, char32_t second) {
    if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
        second < kVBase + kVCount)
        return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
    if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
        second > kTBase && second < kTBase + kTCount)
        return first + (second - kTBase);
    const detail::NfcComposition* end = detail::kCompositions + detail::kCompositionCount;
    auto it =
        std::lower_bound(detail::kCompositions, end, std::pair{first, second},
                         [](const detail::NfcComposition& c, std::pair<char32_t, char32_t> p) {
                             return std::pair{c.first, c.second} < p;
                         });
    return it != end && it->first == first && it->second == second ? it->composite : 0;
}

void append_utf8(char32_t cp, std::string& out) {
    if (cp >= kRawByte) {
        out += static_cast<char>(cp - kRawByte);
    } else if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace

bool is_nfc_quick(std::string_view utf8) {
    for (size_t pos = 0; pos < utf8.size();) {
        // Everything below U+0300 is NFC and combines with nothing before it.
        if (static_cast<unsigned char>(utf8[pos]) < 0xCC) {
            ++pos;
            continue;
        }
        Utf8Char c = decode_utf8(utf8, pos);
        if (c.valid &&
            range_value(detail::kMaybeChanges, detail::kMaybeChangesCount, c.code_point) != 0)
            return false;
        pos += c.length;
    }
    return true;
}

std::string to_nfc(std::string_view utf8) {
    std::vector<char32_t> chars;
    chars.reserve(utf8.size());
    for (size_t pos = 0; pos < utf8.size();) {
        Utf8Char c = decode_utf8(utf8, pos);
        if (c.valid) {
            decompose(c.code_point, chars);
        } else {
            chars.push_back(kRawByte + c.code_point);
        }
        pos += c.length;
    }
    // Canonical ordering: each run of combining marks stably sorted by class.
    for (size_t i = 0; i < chars.size();) {
        if (combining_class(chars[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < chars.size() && combining_class(chars[j]) != 0) ++j;
        std::stable_sort(chars.begin() + i, chars.begin() + j, [](char32_t a, char32_t b) {
            return combining_class(a) < combining_class(b);
        });
        i = j;
    }
    // Canonical composition: a character joins the last starter unless something between them
    // blocks it (a starter, or a mark of the same or a higher class).
    std::vector<char32_t> out;
    out.reserve(chars.size());
    size_t starter = SIZE_MAX;
    int last_class = -1;  // class of the last character after the starter; -1: none yet
    for (char32_t c : chars) {
        const int cls = combining_class(c);
        if (starter != SIZE_MAX && (last_class == -1 || last_class < cls)) {
            if (char32_t composite = compose(out[starter], c)) {
                out[starter] = composite;
                continue;
            }
        }
        if (cls == 0) {
            starter = out.size();
            last_class = -1;
        } else {
            last_class = cls;
        }
        out.push_back(c);
    }
    std::string result;
    result.reserve(utf8.size());
    for (char32_t c : out) append_utf8(c, result);
    return result;
}

}  // namespace weft::data
