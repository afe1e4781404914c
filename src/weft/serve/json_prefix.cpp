#include "weft/serve/json_prefix.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

namespace weft::serve {

namespace {

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

bool JsonPrefix::open(bool object, int32_t node) {
    if (depth_ == kMaxDepth) return false;
    const uint64_t bit = uint64_t(1) << depth_;
    objects_ = object ? objects_ | bit : objects_ & ~bit;
    if (depth_ < JsonSchema::kMaxDepth)
        frame_node_[depth_] = int16_t(node), frame_props_[depth_] = 0;
    ++depth_;
    mode_ = object ? Mode::kObjectFirst : Mode::kArrayFirst;
    return true;
}

bool JsonPrefix::close(bool object) {
    if (depth_ == 0 || top_is_object() != object) return false;
    // A schema's object closes once all of its properties are written.
    const int32_t node = top_node();
    if (object && node >= 0 && frame_props_[depth_ - 1] < schema_->node(node).keys.size())
        return false;
    --depth_;
    value_done();
    return true;
}

void JsonPrefix::value_done() {
    mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfter;
}

int32_t JsonPrefix::next_value_node() const {
    const int32_t node = top_node();
    if (node < 0) return -1;
    const SchemaNode& n = schema_->node(node);
    // An object's value follows the key just begun; an array's elements share one node.
    if (!top_is_object()) return n.items[0];
    const size_t k = size_t(frame_props_[depth_ - 1] - 1);
    return k == 1 && !n.variants.empty() ? n.variants[frame_variant_[depth_ - 1]] : n.items[k];
}

bool JsonPrefix::begin_value(uint8_t c, int32_t node) {
    const SchemaNode::Kind kind = node < 0 ? SchemaNode::Kind::kAny : schema_->node(node).kind;
    using Kind = SchemaNode::Kind;
    switch (c) {
        case '{':
            return (kind == Kind::kAny || kind == Kind::kObject) &&
                   open(true, kind == Kind::kAny ? -1 : node);
        case '[':
            return (kind == Kind::kAny || kind == Kind::kArray) &&
                   open(false, kind == Kind::kAny ? -1 : node);
        case '"':
            if (kind == Kind::kLiterals) break;
            if (kind != Kind::kAny && kind != Kind::kString) return false;
            mode_ = Mode::kString, key_ = false;
            return true;
        default:
            break;
    }
    if (kind == Kind::kLiterals) {
        const SchemaNode& n = schema_->node(node);
        return begin_literal(
            n, (n.literals.size() == 64 ? ~uint64_t(0) : (uint64_t(1) << n.literals.size()) - 1), c,
            false);
    }
    if (c == 't' || c == 'f' || c == 'n')
        return kind == Kind::kAny && begin_literal(JsonSchema::keywords(), 7, c, false);
    if (c != '-' && !is_digit(c)) return false;
    if (kind != Kind::kAny && kind != Kind::kInteger && kind != Kind::kNumber) return false;
    mode_ = Mode::kNumber, int_only_ = kind == Kind::kInteger;
    num_ = c == '-' ? kMinus : c == '0' ? kZero : kInt;
    return true;
}

// A key: any string in an unconstrained object, else exactly the schema's next property's.
bool JsonPrefix::begin_key(uint8_t c) {
    const int32_t node = top_node();
    if (node < 0) {
        if (c != '"') return false;
        mode_ = Mode::kString, key_ = true;
        return true;
    }
    const SchemaNode& n = schema_->node(node);
    const uint8_t k = frame_props_[depth_ - 1];
    if (k >= n.keys.size()) return false;
    // Matched as a literal among the object's keys, only the k-th a candidate (so at most 64
    // properties: JsonSchema refuses more).
    return begin_literal(n, uint64_t(1) << k, c, true);
}

bool JsonPrefix::begin_literal(const SchemaNode& n, uint64_t candidates, uint8_t c, bool key) {
    lit_node_ = &n, lit_mask_ = candidates, lit_at_ = 0, lit_key_ = key;
    mode_ = Mode::kLiteral;
    return literal_byte(c);
}

void JsonPrefix::literal_done() {
    if (!lit_key_) {
        // The first property's value of an object of variants: the one that ends here (the
        // literals are distinct JSON strings, so exactly one) chooses the second's node.
        const int32_t node = top_node();
        if (node >= 0 && top_is_object() && frame_props_[depth_ - 1] == 1 &&
            !schema_->node(node).variants.empty())
            for (uint64_t m = lit_mask_; m; m &= m - 1)
                if (lit_node_->literals[size_t(__builtin_ctzll(m))].size() == lit_at_)
                    frame_variant_[depth_ - 1] = uint8_t(__builtin_ctzll(m));
        return value_done();
    }
    ++frame_props_[depth_ - 1];
    mode_ = Mode::kColon;
}

bool JsonPrefix::literal_byte(uint8_t c) {
    const std::vector<std::string>& all = lit_key_ ? lit_node_->keys : lit_node_->literals;
    uint64_t next = 0;
    bool ended = false;  // a candidate ends before this byte
    for (uint64_t m = lit_mask_; m; m &= m - 1) {
        const std::string& v = all[size_t(__builtin_ctzll(m))];
        if (v.size() == lit_at_)
            ended = true;
        else if (uint8_t(v[lit_at_]) == c)
            next |= m & -m;
    }
    if (next == 0) {
        // The literal ended before this byte (1 of [1, 12] before a comma), which the
        // container reads.
        if (!ended) return false;
        literal_done();
        return step(c);
    }
    lit_mask_ = next, ++lit_at_;
    // Done at once when every candidate left ends here (true, a key): nothing to wait for.
    for (uint64_t m = lit_mask_; m; m &= m - 1)
        if (all[size_t(__builtin_ctzll(m))].size() != lit_at_) return true;
    literal_done();
    return true;
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
            if (int_only_) break;  // a schema's integer: no fraction, no exponent
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
        case Mode::kLiteral:
            return literal_byte(c);
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
            return c == '{' && open(true, schema_ ? schema_->root() : -1);
        case Mode::kObjectFirst:
            if (c == '}') return close(true);
            [[fallthrough]];
        case Mode::kKey:
            return begin_key(c);
        case Mode::kColon:
            if (c != ':') return false;
            mode_ = Mode::kValue;
            return true;
        case Mode::kArrayFirst:
            if (c == ']') return close(false);
            [[fallthrough]];
        case Mode::kValue:
            return begin_value(c, next_value_node());
        case Mode::kAfter:
            if (c == ',') {
                // A schema's object takes a comma only before a property still to come.
                const int32_t node = top_node();
                if (top_is_object() && node >= 0 &&
                    frame_props_[depth_ - 1] >= schema_->node(node).keys.size())
                    return false;
                mode_ = top_is_object() ? Mode::kKey : Mode::kValue;
                return true;
            }
            return (c == '}' || c == ']') && close(c == '}');
        default:
            return false;
    }
}

JsonVocab::JsonVocab(std::vector<std::string> pieces)
    : pieces_(std::move(pieces)), plain_(pieces_.size(), 0), all_(1), other_(1) {
    bool bytes[256] = {};
    for (size_t i = 0; i < pieces_.size(); ++i) {
        const std::string& p = pieces_[i];
        if (p.empty()) continue;
        bool plain = true;
        for (char ch : p) {
            const uint8_t c = uint8_t(ch);
            plain = plain && c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
        }
        plain_[i] = plain;
        insert(all_, p, int32_t(i));
        if (!plain) insert(other_, p, int32_t(i));
        if (p.size() == 1) bytes[uint8_t(p[0])] = true;
    }
    every_byte_ = std::all_of(std::begin(bytes), std::end(bytes), [](bool b) { return b; });
}

void JsonVocab::insert(std::vector<Node>& trie, const std::string& bytes, int32_t id) {
    int32_t at = 0;
    for (char ch : bytes) {
        const uint8_t c = uint8_t(ch);
        auto& kids = trie[size_t(at)].children;
        auto it =
            std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == c; });
        if (it != kids.end()) {
            at = it->second;
            continue;
        }
        const int32_t next = int32_t(trie.size());
        kids.emplace_back(c, next);  // before the push_back that may move `kids`
        trie.emplace_back();
        at = next;
    }
    trie[size_t(at)].ids.push_back(id);
}

void JsonVocab::walk(const std::vector<Node>& trie, const JsonPrefix& at,
                     std::vector<char>& offered) {
    thread_local std::vector<std::pair<int32_t, JsonPrefix>> stack;
    stack.assign(1, {0, at});
    while (!stack.empty()) {
        const auto [node, state] = stack.back();
        stack.pop_back();
        for (int32_t id : trie[size_t(node)].ids) offered[size_t(id)] = 1;
        for (const auto& [byte, child] : trie[size_t(node)].children) {
            JsonPrefix next = state;
            const char b = char(byte);
            if (next.feed(std::string_view(&b, 1))) stack.emplace_back(child, next);
        }
    }
}

void JsonVocab::mask(const JsonPrefix& at, int32_t stop, std::span<float> logits) const {
    constexpr float kOff = -std::numeric_limits<float>::infinity();
    thread_local std::vector<char> offered;
    offered.assign(pieces_.size(), 0);
    if (!at.complete()) {
        // Inside a string every plain token is viable unread; the others are walked.
        const bool plain = at.in_plain_string();
        if (plain)
            for (size_t id = 0; id < pieces_.size(); ++id) offered[id] = plain_[id];
        walk(plain ? other_ : all_, at, offered);
    }
    for (size_t id = 0; id < logits.size(); ++id) {
        const bool on = int32_t(id) == stop ? at.complete() : id < offered.size() && offered[id];
        if (!on) logits[id] = kOff;
    }
}

}  // namespace weft::serve
