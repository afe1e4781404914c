#include "weft/data/encoder_json.hpp"

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

class Parser {
  public:
    Parser(std::string_view s, const std::filesystem::path& path) : s_(s), path_(path) {}

    std::vector<std::pair<std::string, int64_t>> object() {
        std::vector<std::pair<std::string, int64_t>> out;
        skip_space();
        expect('{', "'{' at the start of the object");
        skip_space();
        if (peek() == '}') {
            ++pos_;
        } else {
            for (;;) {
                skip_space();
                std::string key = string();
                skip_space();
                expect(':', "':' after a key");
                skip_space();
                out.emplace_back(std::move(key), integer());
                skip_space();
                if (peek() == '}') {
                    ++pos_;
                    break;
                }
                expect(',', "',' or '}' after a value");
            }
        }
        skip_space();
        if (pos_ != s_.size()) error("nothing after the closing '}'");
        return out;
    }

  private:
    [[noreturn]] void error(std::string_view expected) const {
        std::string found = pos_ < s_.size() ? fmt::format("'{}'", s_[pos_]) : "end of file";
        fail("{}: bad JSON at byte {}: expected {}, found {}", path_.string(), pos_, expected,
             found);
    }
    int peek() const { return pos_ < s_.size() ? static_cast<unsigned char>(s_[pos_]) : -1; }
    void expect(char c, std::string_view what) {
        if (peek() != c) error(what);
        ++pos_;
    }
    void skip_space() {
        while (peek() == ' ' || peek() == '\n' || peek() == '\r' || peek() == '\t') ++pos_;
    }

    uint32_t hex4() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            int c = peek();
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) error("4 hex digits after \\u");
            v = v * 16 + d;
            ++pos_;
        }
        return v;
    }

    static void append_utf8(std::string& out, uint32_t cp) {
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
        }
    }

    std::string string() {
        expect('"', "'\"' to open a key");
        std::string out;
        for (;;) {
            int c = peek();
            if (c < 0) error("'\"' to close the string");
            ++pos_;
            if (c == '"') return out;
            if (c < 0x20) {
                --pos_;
                error("no raw control character inside a string");
            }
            if (c != '\\') {
                out += char(c);
                continue;
            }
            int e = peek();
            ++pos_;
            if (e == 'u') {
                append_utf8(out, code_point());
                continue;
            }
            static constexpr std::string_view kEscaped = "\"\\/bfnrt", kMeant = "\"\\/\b\f\n\r\t";
            size_t k = e < 0 ? std::string_view::npos : kEscaped.find(char(e));
            if (k == std::string_view::npos) --pos_, error("one of \"\\/bfnrtu after a backslash");
            out += kMeant[k];
        }
    }

    // After "\u": one code point, joining a UTF-16 surrogate pair written as two escapes.
    uint32_t code_point() {
        uint32_t hi = hex4();
        if (hi >= 0xDC00 && hi <= 0xDFFF) error("a high surrogate before a low one");
        if (hi < 0xD800 || hi > 0xDBFF) return hi;
        if (peek() != '\\') error("\\u and a low surrogate after a high surrogate");
        ++pos_;
        if (peek() != 'u') error("\\u and a low surrogate after a high surrogate");
        ++pos_;
        uint32_t lo = hex4();
        if (lo < 0xDC00 || lo > 0xDFFF) error("a low surrogate (DC00-DFFF) after a high one");
        return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    }

    int64_t integer() {
        bool negative = peek() == '-';
        if (negative) ++pos_;
        if (peek() < '0' || peek() > '9') error("an integer value");
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            if (v > (INT64_C(1) << 40)) error("an integer small enough for a token id");
            v = v * 10 + (peek() - '0');
            ++pos_;
        }
        if (peek() == '.' || peek() == 'e' || peek() == 'E') error("an integer, not a fraction");
        return negative ? -v : v;
    }

    std::string_view s_;
    const std::filesystem::path& path_;
    size_t pos_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, int64_t>> parse_string_int_object(
    std::string_view json, const std::filesystem::path& path) {
    return Parser(json, path).object();
}

}  // namespace weft::data
