#include "weft/serve/json_prefix.hpp"

#include <limits>

namespace weft::serve {

namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

bool is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int hex_value(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool is_digit(uint8_t c) {
    return c >= '0' && c <= '9';
}

}  // namespace

bool JsonPrefix::feed(std::string_view bytes) {
    for (char c : bytes)
        if (!step(uint8_t(c))) return false;
    return true;
}

bool JsonPrefix::space(uint8_t c) {
    if (gap_ == 0 && (c == ' ' || c == '\n')) {
        gap_ = c == ' ' ? 1 : 2, indent_ = 0;
        return true;
    }
    return gap_ == 2 && (c == ' ' || c == '\t') && ++indent_ <= kMaxIndent;
}

bool JsonPrefix::open(bool object) {
    if (depth_ == kMaxDepth) return false;
    const uint64_t bit = uint64_t(1) << depth_;
    objects_ = object ? objects_ | bit : objects_ & ~bit;
    ++depth_;
    mode_ = object ? Mode::kObjectFirst : Mode::kArrayFirst;
    return true;
}

bool JsonPrefix::close(bool object) {
    if (depth_ == 0 || top_is_object() != object) return false;
    --depth_;
    value_done();
    return true;
}

void JsonPrefix::value_done() {
    mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfter;
}

bool JsonPrefix::begin_value(uint8_t c) {
    switch (c) {
        case '{':
            return open(true);
        case '[':
            return open(false);
        case '"':
            mode_ = Mode::kString, key_ = false;
            return true;
        case '-':
            mode_ = Mode::kNumber, num_ = kMinus;
            return true;
        case 't':
        case 'f':
        case 'n':
            mode_ = Mode::kLiteral, lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2, lit_at_ = 1;
            return true;
        default:
            if (!is_digit(c)) return false;
            mode_ = Mode::kNumber, num_ = c == '0' ? kZero : kInt;
            return true;
    }
}

bool JsonPrefix::string_byte(uint8_t c) {
    if (utf8_need_ > 0) {
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        --utf8_need_, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        return true;
    }
    // After a high surrogate only its low half's escape may come.
    if (low_next_ && c != '\\') return false;
    if (c == '"') {
        if (key_)
            mode_ = Mode::kColon;
        else
            value_done();
        return true;
    }
    if (c == '\\') {
        mode_ = Mode::kEscape;
        return true;
    }
    if (c < 0x20) return false;  // control characters only escaped
    if (c < 0x80) return true;
    // A UTF-8 lead byte and the range of the byte after it (RFC 3629: no overlong form, no
    // surrogate, nothing past U+10FFFF).
    if (c >= 0xC2 && c <= 0xDF)
        utf8_need_ = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        utf8_need_ = 2, utf8_lo_ = c == 0xE0 ? 0xA0 : 0x80, utf8_hi_ = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        utf8_need_ = 3, utf8_lo_ = c == 0xF0 ? 0x90 : 0x80, utf8_hi_ = c == 0xF4 ? 0x8F : 0xBF;
    else
        return false;
    return true;
}

bool JsonPrefix::hex_digit(uint8_t c) {
    const int v = hex_value(c);
    if (v < 0) return false;
    code_ = uint16_t(code_ * 16 + v);
    ++hex_;
    // The values the escape can still take: refused as soon as every one of them is a lone low
    // surrogate, or, after a high one, none of them is its low half.
    const int shift = 4 * (4 - hex_);
    const uint32_t lo = uint32_t(code_) << shift, hi = lo + (uint32_t(1) << shift) - 1;
    const bool overlaps_low = hi >= 0xDC00 && lo <= 0xDFFF;
    const bool all_low = lo >= 0xDC00 && hi <= 0xDFFF;
    if (low_next_ ? !overlaps_low : all_low) return false;
    if (hex_ < 4) return true;
    low_next_ = !low_next_ && code_ >= 0xD800 && code_ <= 0xDBFF;
    mode_ = Mode::kString;
    return true;
}

bool JsonPrefix::number_byte(uint8_t c) {
    const bool digit = is_digit(c), exp = c == 'e' || c == 'E';
    switch (num_) {
        case kMinus:
            if (!digit) return false;
            num_ = c == '0' ? kZero : kInt;
            return true;
        case kZero:
        case kInt:
        case kFrac:
            if (digit && num_ != kZero) return true;
            if (c == '.' && num_ != kFrac) return num_ = kDot, true;
            if (exp) return num_ = kExp, true;
            break;
        case kDot:
            if (!digit) return false;
            num_ = kFrac;
            return true;
        case kExp:
            if (c == '+' || c == '-') return num_ = kExpSign, true;
            [[fallthrough]];
        case kExpSign:
            if (!digit) return false;
            num_ = kExpDigits;
            return true;
        case kExpDigits:
            if (digit) return true;
            break;
    }
    // The number ended before this byte, which the container reads.
    value_done();
    return step(c);
}

bool JsonPrefix::step(uint8_t c) {
    switch (mode_) {
        case Mode::kString:
            return string_byte(c);
        case Mode::kEscape:
            if (c == 'u') {
                mode_ = Mode::kHex, hex_ = 0, code_ = 0;
                return true;
            }
            if (low_next_) return false;
            switch (c) {
                case '"':
                case '\\':
                case '/':
                case 'b':
                case 'f':
                case 'n':
                case 'r':
                case 't':
                    mode_ = Mode::kString;
                    return true;
                default:
                    return false;
            }
        case Mode::kHex:
            return hex_digit(c);
        case Mode::kNumber:
            return number_byte(c);
        case Mode::kLiteral: {
            const std::string_view word = kLiterals[lit_];
            if (c != uint8_t(word[lit_at_])) return false;
            if (++lit_at_ == word.size()) value_done();
            return true;
        }
        case Mode::kDone:
            return false;
        default:
            break;
    }
    // Between tokens of the grammar.
    if (is_space(c)) return mode_ != Mode::kStart && space(c);
    gap_ = 0;
    switch (mode_) {
        case Mode::kStart:
            return c == '{' && open(true);
        case Mode::kObjectFirst:
            if (c == '}') return close(true);
            [[fallthrough]];
        case Mode::kKey:
            if (c != '"') return false;
            mode_ = Mode::kString, key_ = true;
            return true;
        case Mode::kColon:
            if (c != ':') return false;
            mode_ = Mode::kValue;
            return true;
        case Mode::kArrayFirst:
            if (c == ']') return close(false);
            [[fallthrough]];
        case Mode::kValue:
            return begin_value(c);
        case Mode::kAfter:
            if (c == ',') {
                mode_ = top_is_object() ? Mode::kKey : Mode::kValue;
                return true;
            }
            return (c == '}' || c == ']') && close(c == '}');
        default:
            return false;
    }
}

JsonVocab::JsonVocab(std::vector<std::string> pieces)
    : pieces_(std::move(pieces)), plain_(pieces_.size(), 0) {
    for (size_t i = 0; i < pieces_.size(); ++i) {
        bool plain = !pieces_[i].empty();
        for (char ch : pieces_[i]) {
            const uint8_t c = uint8_t(ch);
            plain = plain && c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
        }
        plain_[i] = plain;
    }
}

void JsonVocab::mask(const JsonPrefix& at, int32_t stop, std::span<float> logits) const {
    constexpr float kOff = -std::numeric_limits<float>::infinity();
    const bool done = at.complete(), plain = at.in_plain_string();
    for (size_t id = 0; id < logits.size(); ++id) {
        if (int32_t(id) == stop) {
            if (!done) logits[id] = kOff;
            continue;
        }
        if (done || id >= pieces_.size() || pieces_[id].empty()) {
            logits[id] = kOff;
            continue;
        }
        if (plain && plain_[id]) continue;
        JsonPrefix next = at;
        if (!next.feed(pieces_[id])) logits[id] = kOff;
    }
}

}  // namespace weft::serve
