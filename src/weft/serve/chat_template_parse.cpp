// A chat template's tags (chat_template_lex.cpp) -> its syntax tree: each tag's expression by
// recursive descent in Jinja's precedence (jinja2/parser.py), the statements nested by their end
// tags. Whatever the subset does not have is an error here, when the server starts, not when a
// request comes.

#include "weft/core/error.hpp"
#include "weft/serve/chat_template_syntax.hpp"

namespace weft::serve::jinja {

namespace {

using ExprPtr = std::unique_ptr<Expr>;

class ExprParser {
  public:
    ExprParser(std::string_view source, int line) : toks_(lex(source, line)), line_(line) {}

    const Token& peek(size_t ahead = 0) const {
        return toks_[std::min(i_ + ahead, toks_.size() - 1)];
    }
    bool at(std::string_view text, Token::Kind k = Token::Kind::kOp) const {
        return peek().kind == k && peek().text == text;
    }
    bool at_name(std::string_view text) const { return at(text, Token::Kind::kName); }
    bool accept(std::string_view text) {
        if (!at(text) && !at_name(text)) return false;
        ++i_;
        return true;
    }
    void expect(std::string_view text) {
        WEFT_CHECK(accept(text), "line {}: expected '{}', found '{}'", line_, text, show(peek()));
    }
    std::string name() {
        WEFT_CHECK(peek().kind == Token::Kind::kName, "line {}: expected a name, found '{}'", line_,
                   show(peek()));
        return toks_[i_++].text;
    }
    void expect_end() {
        WEFT_CHECK(peek().kind == Token::Kind::kEnd, "line {}: unexpected '{}'", line_,
                   show(peek()));
    }
    static std::string show(const Token& t) {
        return t.kind == Token::Kind::kEnd ? "end of tag" : t.text;
    }

    ExprPtr expression() {
        ExprPtr e = or_expr();
        if (!at_name("if")) return e;
        ++i_;
        ExprPtr cond = or_expr();
        ExprPtr other = accept("else") ? expression() : nullptr;
        return node(Expr::Kind::kIfElse, "", std::move(cond), std::move(e), std::move(other));
    }

  private:
    template <typename... E>
    ExprPtr node(Expr::Kind k, std::string name, E&&... args) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->name = std::move(name);
        e->line = line_;
        (e->args.push_back(std::forward<E>(args)), ...);
        return e;
    }
    ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
        return node(Expr::Kind::kBinary, std::move(op), std::move(a), std::move(b));
    }

    ExprPtr or_expr() {
        ExprPtr e = and_expr();
        while (accept("or")) e = binary("or", std::move(e), and_expr());
        return e;
    }
    ExprPtr and_expr() {
        ExprPtr e = not_expr();
        while (accept("and")) e = binary("and", std::move(e), not_expr());
        return e;
    }
    ExprPtr not_expr() {
        if (accept("not")) return node(Expr::Kind::kUnary, "not", not_expr());
        return compare();
    }
    ExprPtr compare() {
        ExprPtr e = add();
        for (;;) {
            std::string op;
            for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
                if (at(o)) op = o;
            if (!op.empty()) {
                ++i_;
            } else if (at_name("in")) {
                ++i_;
                op = "in";
            } else if (at_name("not") && peek(1).kind == Token::Kind::kName &&
                       peek(1).text == "in") {
                i_ += 2;
                op = "not in";
            } else {
                return e;
            }
            e = binary(op, std::move(e), add());
        }
    }
    ExprPtr add() {
        ExprPtr e = concat();
        while (at("+") || at("-")) {
            std::string op = toks_[i_++].text;
            e = binary(op, std::move(e), concat());
        }
        return e;
    }
    ExprPtr concat() {
        ExprPtr e = multiply();
        while (accept("~")) e = binary("~", std::move(e), multiply());
        return e;
    }
    ExprPtr multiply() {
        ExprPtr e = unary();
        while (at("*") || at("/") || at("//") || at("%")) {
            std::string op = toks_[i_++].text;
            e = binary(op, std::move(e), unary());
        }
        return e;
    }
    ExprPtr unary() {
        if (accept("-")) return filters(node(Expr::Kind::kUnary, "-", unary_operand()));
        return filters(postfix(primary()));
    }
    ExprPtr unary_operand() {
        if (accept("-")) return node(Expr::Kind::kUnary, "-", unary_operand());
        return postfix(primary());
    }

    ExprPtr primary() {
        const Token& t = peek();
        if (t.kind == Token::Kind::kString || t.kind == Token::Kind::kNumber) {
            ExprPtr e = node(Expr::Kind::kLiteral, "");
            e->value = t.value;
            // Adjacent string literals are one, as in Python.
            for (++i_; t.kind == Token::Kind::kString && peek().kind == Token::Kind::kString;)
                e->value = e->value.get<std::string>() + toks_[i_++].value.get<std::string>();
            return e;
        }
        if (t.kind == Token::Kind::kName) {
            ++i_;
            ExprPtr e = node(Expr::Kind::kLiteral, "");
            if (t.text == "true" || t.text == "True")
                e->value = true;
            else if (t.text == "false" || t.text == "False")
                e->value = false;
            else if (t.text == "none" || t.text == "None")
                e->value = nullptr;
            else
                e = node(Expr::Kind::kName, t.text);
            return e;
        }
        if (accept("(")) {
            ExprPtr e = expression();
            WEFT_CHECK(!at(","), "line {}: tuples are not in weft's chat template subset", line_);
            expect(")");
            return e;
        }
        if (accept("[")) {
            ExprPtr e = node(Expr::Kind::kList, "");
            while (!accept("]")) {
                e->args.push_back(expression());
                if (!at("]")) expect(",");
            }
            return e;
        }
        if (accept("{")) {
            ExprPtr e = node(Expr::Kind::kDict, "");
            while (!accept("}")) {
                e->args.push_back(expression());
                expect(":");
                e->args.push_back(expression());
                if (!at("}")) expect(",");
            }
            return e;
        }
        fail("line {}: expected a value, found '{}'", line_, show(t));
    }

    ExprPtr postfix(ExprPtr e) {
        for (;;) {
            if (accept(".")) {
                std::string attr = name();
                if (at("(")) {
                    WEFT_CHECK(is_method(attr),
                               "line {}: the method '.{}()' is not in weft's chat template subset",
                               line_, attr);
                    ExprPtr call = node(Expr::Kind::kCall, attr, std::move(e));
                    call->method = true;
                    arguments(*call);
                    e = std::move(call);
                } else {
                    e = node(Expr::Kind::kAttr, attr, std::move(e));
                }
            } else if (accept("[")) {
                ExprPtr parts[3];
                bool slice = false;
                for (int k = 0; k < 3; ++k) {
                    if (!at(":") && !at("]")) parts[k] = expression();
                    if (k == 2 || !accept(":")) break;
                    slice = true;
                }
                expect("]");
                if (slice) {
                    e = node(Expr::Kind::kSlice, "", std::move(e), std::move(parts[0]),
                             std::move(parts[1]), std::move(parts[2]));
                } else {
                    WEFT_CHECK(parts[0] != nullptr, "line {}: an empty subscript '[]'", line_);
                    e = node(Expr::Kind::kIndex, "", std::move(e), std::move(parts[0]));
                }
            } else if (at("(")) {
                WEFT_CHECK(e->kind == Expr::Kind::kName && is_function(e->name),
                           "line {}: the function '{}()' is not in weft's chat template subset",
                           line_, e->kind == Expr::Kind::kName ? e->name : "(an expression)");
                ExprPtr call = node(Expr::Kind::kCall, e->name);
                arguments(*call);
                e = std::move(call);
            } else {
                return e;
            }
        }
    }

    // (a, b, key=c): keyword arguments are taken by name only where the subset knows them
    // (tojson's indent), their names kept in the argument's `name`.
    void arguments(Expr& call) {
        expect("(");
        while (!accept(")")) {
            std::string keyword;
            if (peek().kind == Token::Kind::kName && peek(1).kind == Token::Kind::kOp &&
                peek(1).text == "=") {
                keyword = name();
                ++i_;
            }
            ExprPtr a = expression();
            a->name = a->kind == Expr::Kind::kLiteral ? keyword : a->name;
            WEFT_CHECK(keyword.empty() || a->kind == Expr::Kind::kLiteral,
                       "line {}: the keyword argument '{}' must be a literal", line_, keyword);
            call.args.push_back(std::move(a));
            if (!at(")")) expect(",");
        }
    }

    ExprPtr filters(ExprPtr e) {
        for (;;) {
            if (accept("|")) {
                std::string f = name();
                WEFT_CHECK(is_filter(f),
                           "line {}: the filter '{}' is not in weft's chat template subset", line_,
                           f);
                ExprPtr call = node(Expr::Kind::kFilter, f, std::move(e));
                if (at("(")) arguments(*call);
                e = std::move(call);
            } else if (accept("is")) {
                const bool negate = accept("not");
                std::string t = name();
                WEFT_CHECK(is_test(t),
                           "line {}: the test 'is {}' is not in weft's chat template subset", line_,
                           t);
                ExprPtr test = node(Expr::Kind::kTest, t, std::move(e));
                test->negate = negate;
                if (at("(")) arguments(*test);
                e = std::move(test);
            } else {
                return e;
            }
        }
    }

    std::vector<Token> toks_;
    size_t i_ = 0;
    int line_;
};

// The statements of a template's pieces, each block nested up to its end tag.
class StatementParser {
  public:
    explicit StatementParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

    std::vector<Node> parse_all() {
        std::vector<Node> nodes;
        block(nodes, {});
        return nodes;
    }

  private:
    // Parses into `out` until a tag named in `until`; returns that tag's keyword, its
    // expression parser left after the keyword in `rest_`.
    std::string block(std::vector<Node>& out, std::vector<std::string_view> until) {
        while (i_ < pieces_.size()) {
            const Piece& p = pieces_[i_++];
            line_ = p.line;
            if (!p.tag) {
                if (!p.text.empty()) out.push_back(text_node(p.text));
                continue;
            }
            auto parser = std::make_unique<ExprParser>(p.text, p.line);
            if (p.output) {
                Node n{Node::Kind::kOutput, "", parser->expression(), {}, {}, p.line};
                parser->expect_end();
                out.push_back(std::move(n));
                continue;
            }
            const std::string word = parser->name();
            for (std::string_view u : until)
                if (word == u) {
                    rest_ = std::move(parser);
                    return word;
                }
            out.push_back(statement(word, *parser, p.line));
        }
        WEFT_CHECK(until.empty(),
                   "line {}: the template ends inside a block (expected '{{% {} %}}')", line_,
                   until.empty() ? "" : until.back());
        return "";
    }

    static Node text_node(std::string t) {
        return {Node::Kind::kText, std::move(t), nullptr, {}, {}, 0};
    }

    Node statement(const std::string& word, ExprParser& e, int line) {
        Node n{Node::Kind::kText, "", nullptr, {}, {}, line};
        if (word == "if") {
            n.kind = Node::Kind::kIf;
            ExprPtr cond = e.expression();
            e.expect_end();
            for (bool in_else = false;;) {
                std::vector<Node> body;
                const std::string end = block(body, {"elif", "else", "endif"});
                n.branches.emplace_back(std::move(cond), std::move(body));
                WEFT_CHECK(!in_else || end == "endif", "line {}: '{{% {} %}}' after '{{% else %}}'",
                           line_, end);
                in_else = end == "else";
                cond = end == "elif" ? rest_->expression() : nullptr;
                rest_->expect_end();
                if (end == "endif") break;
            }
        } else if (word == "for") {
            n.kind = Node::Kind::kFor;
            n.text = e.name();
            WEFT_CHECK(!e.at(","),
                       "line {}: a for loop over several names ('{}, ...') is not in weft's chat "
                       "template subset",
                       line, n.text);
            e.expect("in");
            n.expr = e.expression();
            WEFT_CHECK(!e.at_name("if") && !e.at_name("recursive"),
                       "line {}: '{}' in a for loop is not in weft's chat template subset", line,
                       ExprParser::show(e.peek()));
            e.expect_end();
            const std::string end = block(n.body, {"endfor", "else"});
            WEFT_CHECK(end == "endfor",
                       "line {}: '{{% for %}}...{{% else %}}' is not in weft's "
                       "chat template subset",
                       line_);
            rest_->expect_end();
        } else if (word == "set") {
            n.kind = Node::Kind::kSet;
            n.text = e.name();
            WEFT_CHECK(e.at("="),
                       "line {}: '{{% set {}{} %}}' is not in weft's chat template subset (only "
                       "'set name = value')",
                       line, n.text, e.at(".") ? ".attribute" : "");
            e.expect("=");
            n.expr = e.expression();
            e.expect_end();
        } else {
            WEFT_CHECK(!word.starts_with("end") && word != "elif" && word != "else",
                       "line {}: '{{% {} %}}' without its opening tag", line, word);
            fail("line {}: the statement '{{% {} %}}' is not in weft's chat template subset", line,
                 word);
        }
        return n;
    }

    std::vector<Piece> pieces_;
    size_t i_ = 0;
    int line_ = 1;
    std::unique_ptr<ExprParser> rest_;
};

}  // namespace

std::vector<Node> parse(std::string_view source) {
    return StatementParser(split_tags(source)).parse_all();
}

}  // namespace weft::serve::jinja
