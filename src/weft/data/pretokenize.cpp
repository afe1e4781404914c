#include "weft/data/pretokenize.hpp"

#include <algorithm>

namespace weft::data {

CharClass char_class(uint32_t code_point) {
    if (code_point < 128) return detail::kAsciiClass[code_point];
    const detail::UnicodeRange* begin = detail::kUnicodeRanges;
    const detail::UnicodeRange* end = begin + detail::kUnicodeRangeCount;
    // First range that starts after the code point; the one before it may contain it.
    auto it =
        std::upper_bound(begin, end, code_point,
                         [](uint32_t cp, const detail::UnicodeRange& r) { return cp < r.first; });
    if (it == begin) return CharClass::kOther;
    --it;
    return code_point <= it->last ? it->cls : CharClass::kOther;
}

Utf8Char decode_utf8(std::string_view s, size_t pos) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
    size_t left = s.size() - pos;
    unsigned b0 = p[0];
    if (b0 < 0x80) return {b0, 1, true};
    uint32_t len = 0, cp = 0, lo = 0x80, hi = 0xBF;  // lo/hi: allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3, cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;  // overlong
        if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4, cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;  // overlong
        if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
        return {b0, 1, false};
    }
    if (left < len || p[1] < lo || p[1] > hi) return {b0, 1, false};
    for (uint32_t i = 1; i < len; ++i) {
        if ((p[i] & 0xC0) != 0x80) return {b0, 1, false};
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    return {cp, len, true};
}

namespace {

struct Char {
    CharClass cls;
    uint32_t len;  // bytes
};

// An invalid byte is one character of class "other", so the split never loses or reorders bytes.
Char char_at(std::string_view s, size_t pos) {
    auto b0 = static_cast<unsigned char>(s[pos]);
    if (b0 < 0x80) return {detail::kAsciiClass[b0], 1};
    Utf8Char c = decode_utf8(s, pos);
    return {c.valid ? char_class(c.code_point) : CharClass::kOther, c.length};
}

// 's 't 'm 'd 're 've 'll: ASCII only, and case-sensitive as in encoder.py.
size_t contraction_length(std::string_view s, size_t pos) {
    if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
    char c1 = s[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= s.size()) return 0;
    char c2 = s[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// Llama 3's `(?i:'s|'t|'re|'ve|'m|'ll|'d)`. Of all code points only U+017F (long s) case-folds
// to one of these ASCII letters, and Oniguruma does match it.
size_t contraction_length_any_case(std::string_view s, size_t pos) {
    if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
    auto lower = [&](size_t i) { return i < s.size() ? static_cast<char>(s[i] | 0x20) : '\0'; };
    char c1 = lower(pos + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (s.substr(pos + 1, 2) == "\u017F") return 3;
    char c2 = lower(pos + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// End of the run of characters of class `cls` that starts at `pos`.
size_t run_end(std::string_view text, size_t pos, CharClass cls) {
    while (pos < text.size()) {
        Char c = char_at(text, pos);
        if (c.cls != cls) break;
        pos += c.len;
    }
    return pos;
}

bool is_cr_or_lf(char c) {
    return c == '\r' || c == '\n';
}

}  // namespace

size_t pretoken_end(std::string_view text, size_t begin) {
    const size_t n = text.size();
    if (size_t len = contraction_length(text, begin)) return begin + len;

    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run of one
    // class. A space followed by white space (or nothing) matches none of them.
    Char first = char_at(text, begin);
    size_t start = begin;
    if (text[begin] == ' ' && begin + 1 < n) {
        Char next = char_at(text, begin + 1);
        if (next.cls != CharClass::kSpace) first = next, start = begin + 1;
    }
    if (first.cls != CharClass::kSpace) {
        size_t end = start + first.len;
        while (end < n) {
            Char c = char_at(text, end);
            if (c.cls != first.cls) break;
            end += c.len;
        }
        return end;
    }

    // `\s+(?!\S)|\s+`: a run of white space. When something follows it, the run gives its last
    // character back so that " word" keeps its space, unless the run is that one character.
    size_t last = begin, end = begin + first.len;
    while (end < n) {
        Char c = char_at(text, end);
        if (c.cls != CharClass::kSpace) break;
        last = end;
        end += c.len;
    }
    return (end < n && last > begin) ? last : end;
}

size_t pretoken_end_llama3(std::string_view text, size_t begin, int max_digits) {
    const size_t n = text.size();
    if (size_t len = contraction_length_any_case(text, begin)) return begin + len;
    const Char first = char_at(text, begin);
    const size_t second = begin + first.len;

    // `[^\r\n\p{L}\p{N}]?\p{L}+`: letters, after at most one character that is none of those.
    if (first.cls == CharClass::kLetter) return run_end(text, begin, CharClass::kLetter);
    if (first.cls != CharClass::kNumber && !is_cr_or_lf(text[begin]) && second < n &&
        char_at(text, second).cls == CharClass::kLetter)
        return run_end(text, second, CharClass::kLetter);

    // `\p{N}{1,3}`
    if (first.cls == CharClass::kNumber) {
        size_t end = begin;
        for (int k = 0; k < max_digits && end < n; ++k) {
            Char c = char_at(text, end);
            if (c.cls != CharClass::kNumber) break;
            end += c.len;
        }
        return end;
    }

    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    size_t other = std::string_view::npos;
    if (first.cls == CharClass::kOther) {
        other = begin;
    } else if (text[begin] == ' ' && second < n && char_at(text, second).cls == CharClass::kOther) {
        other = second;
    }
    if (other != std::string_view::npos) {
        size_t end = run_end(text, other, CharClass::kOther);
        while (end < n && is_cr_or_lf(text[end])) ++end;
        return end;
    }

    // White space from here on. `\s*[\r\n]+`: the run's \s* backtracks to its last CR or LF.
    size_t end = begin, last = begin, last_newline = std::string_view::npos;
    while (end < n) {
        Char c = char_at(text, end);
        if (c.cls != CharClass::kSpace) break;
        if (is_cr_or_lf(text[end])) last_newline = end;
        last = end;
        end += c.len;
    }
    if (last_newline != std::string_view::npos) return last_newline + 1;
    // `\s+(?!\S)|\s+`, as in GPT-2's pattern.
    return (end < n && last > begin) ? last : end;
}

size_t pretoken_end_digits(std::string_view text, size_t begin, bool individual) {
    const Char first = char_at(text, begin);
    if (first.cls == CharClass::kNumber)
        return individual ? begin + first.len : run_end(text, begin, CharClass::kNumber);
    size_t end = begin + first.len;
    while (end < text.size()) {
        Char c = char_at(text, end);
        if (c.cls == CharClass::kNumber) break;
        end += c.len;
    }
    return end;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
    std::vector<std::string_view> pieces;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = pretoken_end(text, pos);
        pieces.push_back(text.substr(pos, end - pos));
        pos = end;
    }
    return pieces;
}

}  // namespace weft::data
