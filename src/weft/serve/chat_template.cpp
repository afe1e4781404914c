// Evaluates a chat template's syntax tree (chat_template_syntax.hpp): its statements, its
// variables and scopes (a for loop's own, with `loop`), and its expressions, whose operations on
// values are chat_template_values.cpp's. An operation that does not apply is an error naming the
// template's line.
#include "weft/serve/chat_template.hpp"

#include <map>

#include "weft/serve/chat_template_syntax.hpp"
#include "weft/serve/chat_template_values.hpp"

namespace weft::serve {

using nlohmann::json;
using namespace jinja;

namespace {

class Renderer {
  public:
    explicit Renderer(const ChatTemplate::Variables& v) {
        scopes_.push_back({{"messages", v.messages},
                           {"add_generation_prompt", v.add_generation_prompt},
                           {"bos_token", v.bos_token},
                           {"eos_token", v.eos_token},
                           {"tools", v.tools}});
    }

    void run(const std::vector<Node>& nodes) {
        for (const Node& n : nodes) run(n);
    }
    std::string out;

  private:
    [[noreturn]] static void error(const Expr& e, const std::string& what) {
        fail("chat template line {}: {}", e.line, what);
    }

    void run(const Node& n) {
        switch (n.kind) {
            case Node::Kind::kText:
                out += n.text;
                return;
            case Node::Kind::kOutput:
                out += text_of(eval(*n.expr));
                return;
            case Node::Kind::kSet:
                scopes_.back()[n.text] = eval(*n.expr);
                return;
            case Node::Kind::kIf:
                for (const auto& [cond, body] : n.branches)
                    if (!cond || truthy(eval(*cond))) return run(body);
                return;
            case Node::Kind::kFor:
                return loop(n);
        }
    }

    void loop(const Node& n) {
        const json seq = eval(*n.expr);
        std::vector<json> items;
        if (seq.is_array()) {
            items.assign(seq.begin(), seq.end());
        } else if (seq.is_object()) {
            for (auto it = seq.begin(); it != seq.end(); ++it) items.emplace_back(it.key());
        } else if (seq.is_string()) {
            for (std::string& c : code_points(seq.get<std::string>())) items.emplace_back(c);
        } else if (!is_undefined(seq)) {
            error(*n.expr, fmt::format("cannot loop over a {} ({})", type_of(seq), text_of(seq)));
        }
        scopes_.emplace_back();
        const int64_t N = int64_t(items.size());
        for (int64_t i = 0; i < N; ++i) {
            scopes_.back()[n.text] = items[size_t(i)];
            scopes_.back()["loop"] = {{"index", i + 1},        {"index0", i}, {"first", i == 0},
                                      {"last", i == N - 1},    {"length", N}, {"revindex", N - i},
                                      {"revindex0", N - i - 1}};
            run(n.body);
        }
        scopes_.pop_back();
    }

    json lookup(const std::string& name) const {
        for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
            if (auto it = s->find(name); it != s->end()) return it->second;
        return undefined();
    }

    json eval(const Expr& e) {
        try {
            return eval_here(e);
        } catch (const ValueError& x) {  // the innermost expression names the line
            error(e, x.what());
        }
    }

    json eval_here(const Expr& e) {
        switch (e.kind) {
            case Expr::Kind::kLiteral:
                return e.value;
            case Expr::Kind::kName:
                return lookup(e.name);
            case Expr::Kind::kList:
                return json(arguments(e, 0));
            case Expr::Kind::kDict: {
                json d = json::object();
                for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    const json k = eval(*e.args[i]);
                    if (!k.is_string()) error(e, "a dict key must be a string, got " + text_of(k));
                    d[k.get<std::string>()] = eval(*e.args[i + 1]);
                }
                return d;
            }
            case Expr::Kind::kAttr:
                return item(eval(*e.args[0]), json(e.name));
            case Expr::Kind::kIndex:
                return item(eval(*e.args[0]), eval(*e.args[1]));
            case Expr::Kind::kSlice: {
                const json v = eval(*e.args[0]);
                return slice(v, bound(e.args[1]), bound(e.args[2]), bound(e.args[3]).value_or(1));
            }
            case Expr::Kind::kCall: {
                if (e.method) return method(e.name, eval(*e.args[0]), arguments(e, 1));
                const std::vector<json> a =
                    arguments(e, 0);  // raise_exception, the only global function
                throw TemplateRaised(a.empty() ? "the chat template refused the conversation"
                                               : text_of(a[0]));
            }
            case Expr::Kind::kFilter: {
                std::vector<std::string> keywords;
                for (size_t i = 1; i < e.args.size(); ++i)
                    keywords.push_back(e.args[i]->kind == Expr::Kind::kLiteral ? e.args[i]->name
                                                                               : "");
                return filter(e.name, eval(*e.args[0]), arguments(e, 1), keywords);
            }
            case Expr::Kind::kTest:
                return test(e.name, eval(*e.args[0])) != e.negate;
            case Expr::Kind::kUnary: {
                const json v = eval(*e.args[0]);
                if (e.name == "not") return !truthy(v);
                if (!v.is_number()) error(e, "cannot negate a " + type_of(v));
                return v.is_number_float() ? json(-v.get<double>()) : json(-v.get<int64_t>());
            }
            case Expr::Kind::kBinary: {
                const json a = eval(*e.args[0]);
                if (e.name == "and") return truthy(a) ? eval(*e.args[1]) : a;
                if (e.name == "or") return truthy(a) ? a : eval(*e.args[1]);
                return binary(e.name, a, eval(*e.args[1]));
            }
            case Expr::Kind::kIfElse:
                if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
                return e.args[2] ? eval(*e.args[2]) : undefined();
        }
        return undefined();
    }

    // A slice bound: none when absent or none.
    std::optional<int64_t> bound(const std::unique_ptr<Expr>& x) {
        if (!x) return std::nullopt;
        const json b = eval(*x);
        if (b.is_null()) return std::nullopt;
        if (!b.is_number_integer())
            throw ValueError("a slice bound must be an integer, got " + text_of(b));
        return b.get<int64_t>();
    }

    std::vector<json> arguments(const Expr& e, size_t first) {
        std::vector<json> a;
        for (size_t i = first; i < e.args.size(); ++i) a.push_back(eval(*e.args[i]));
        return a;
    }

    std::vector<std::map<std::string, json>> scopes_;
};

}  // namespace

struct ChatTemplate::Impl {
    std::vector<Node> nodes;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::parse(std::string_view source) {
    auto impl = std::make_unique<Impl>();
    impl->nodes = jinja::parse(source);
    return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const Variables& v) const {
    Renderer r(v);
    r.run(impl_->nodes);
    return std::move(r.out);
}

}  // namespace weft::serve
