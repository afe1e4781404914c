// A chat template's text -> its tags and text, with Jinja's whitespace control, and a tag's
// text -> its tokens.
#include <algorithm>
#include <cctype>

#include "weft/core/error.hpp"
#include "weft/serve/chat_template_syntax.hpp"

namespace weft::serve::jinja {

namespace {

int line_at(std::string_view s, size_t pos) {
    return 1 + int(std::count(s.begin(), s.begin() + std::ptrdiff_t(pos), '\n'));
}

bool blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

// Tags and text, with the whitespace control of Hugging Face's environment (trim_blocks and
// lstrip_blocks on, as transformers renders chat templates) and of "-" inside a tag.
std::vector<Piece> split_tags(std::string_view s) {
    std::vector<Piece> pieces;
    bool strip_next = false, trim_newline = false;
    size_t pos = 0;
    for (;;) {
        size_t open = s.find('{', pos);
        while (open != std::string_view::npos && open + 1 < s.size() && s[open + 1] != '{' &&
               s[open + 1] != '%' && s[open + 1] != '#')
            open = s.find('{', open + 1);
        if (open != std::string_view::npos && open + 1 >= s.size()) open = std::string_view::npos;
        std::string text(s.substr(pos, open == std::string_view::npos ? s.npos : open - pos));
        if (trim_newline && text.starts_with("\n")) text.erase(0, 1);
        if (trim_newline && text.starts_with("\r\n")) text.erase(0, 2);
        if (strip_next)
            text.erase(0, std::find_if_not(text.begin(), text.end(), blank) - text.begin());
        if (open == std::string_view::npos) {
            pieces.push_back({false, false, std::move(text), 0});
            return pieces;
        }
        const char kind = s[open + 1];
        const bool block = kind != '{';
        const char close_char = kind == '{' ? '}' : kind;
        const size_t close = s.find(std::string{close_char, '}'}, open + 2);
        const int line = line_at(s, open);
        WEFT_CHECK(close != std::string_view::npos, "line {}: '{{{}' is never closed", line, kind);
        std::string_view inner = s.substr(open + 2, close - open - 2);
        const bool strip_before = inner.starts_with("-");
        const bool keep_before = inner.starts_with("+");
        if (strip_before || keep_before) inner.remove_prefix(1);
        strip_next = inner.ends_with("-");
        if (strip_next || inner.ends_with("+")) inner.remove_suffix(1);
        if (strip_before) {
            text.erase(std::find_if_not(text.rbegin(), text.rend(), blank).base(), text.end());
        } else if (block && !keep_before) {
            // lstrip_blocks: spaces and tabs from the start of the tag's line.
            size_t b = text.size();
            while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t')) --b;
            const size_t at = open - (text.size() - b);
            if (at == 0 || s[at - 1] == '\n') text.erase(b);
        }
        pieces.push_back({false, false, std::move(text), 0});
        trim_newline = block && !strip_next;  // trim_blocks
        if (kind != '#') pieces.push_back({true, kind == '{', std::string(inner), line});
        pos = close + 2;
    }
}

std::vector<Token> lex(std::string_view s, int line) {
    std::vector<Token> out;
    size_t i = 0;
    while (i < s.size()) {
        const char c = s[i];
        if (blank(c)) {
            ++i;
        } else if (std::isalpha(uint8_t(c)) || c == '_') {
            size_t e = i;
            while (e < s.size() && (std::isalnum(uint8_t(s[e])) || s[e] == '_')) ++e;
            out.push_back({Token::Kind::kName, std::string(s.substr(i, e - i)), nullptr});
            i = e;
        } else if (std::isdigit(uint8_t(c))) {
            size_t e = i;
            while (e < s.size() && std::isdigit(uint8_t(s[e]))) ++e;
            const bool real = e + 1 < s.size() && s[e] == '.' && std::isdigit(uint8_t(s[e + 1]));
            if (real)
                for (++e; e < s.size() && std::isdigit(uint8_t(s[e]));) ++e;
            const std::string digits(s.substr(i, e - i));
            out.push_back(
                {Token::Kind::kNumber, digits,
                 real ? nlohmann::json(std::stod(digits)) : nlohmann::json(std::stoll(digits))});
            i = e;
        } else if (c == '\'' || c == '"') {
            std::string v;
            size_t e = i + 1;
            for (; e < s.size() && s[e] != c; ++e) {
                if (s[e] != '\\' || e + 1 == s.size()) {
                    v += s[e];
                    continue;
                }
                switch (const char x = s[++e]) {
                    case 'n':
                        v += '\n';
                        break;
                    case 't':
                        v += '\t';
                        break;
                    case 'r':
                        v += '\r';
                        break;
                    case '\\':
                    case '\'':
                    case '"':
                        v += x;
                        break;
                    default:
                        v += '\\', v += x;  // Python keeps unknown escapes
                }
            }
            WEFT_CHECK(e < s.size(), "line {}: a string is never closed: {}", line, s.substr(i));
            out.push_back({Token::Kind::kString, std::string(s.substr(i, e + 1 - i)), v});
            i = e + 1;
        } else {
            static constexpr std::string_view two[] = {"//", "==", "!=", "<=", ">=", "**"};
            const bool pair =
                std::find(std::begin(two), std::end(two), s.substr(i, 2)) != std::end(two);
            const std::string_view op = s.substr(i, pair ? 2 : 1);
            WEFT_CHECK(op.size() == 2 ? op != "**"
                                      : std::string_view("+-*/%~<>=()[]{}.,:|").find(c) != s.npos,
                       "line {}: the operator '{}' is not in weft's chat template subset", line,
                       op);
            out.push_back({Token::Kind::kOp, std::string(op), nullptr});
            i += op.size();
        }
    }
    out.push_back({Token::Kind::kEnd, "", nullptr});
    return out;
}

}  // namespace weft::serve::jinja
