#pragma once
// The syntax tree of a chat template (the Jinja subset of chat_template.hpp): what
// chat_template_parse.cpp builds from the text and chat_template.cpp evaluates. Not for use
// outside those files.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace weft::serve::jinja {

// A piece of the source: text, or the inside of a {{ }} / {% %} tag (comments are dropped).
struct Piece {
    bool tag = false, output = false;
    std::string text;
    int line = 0;
};

// Tags and text, with the whitespace control of Hugging Face's environment.
std::vector<Piece> split_tags(std::string_view source);

struct Token {
    enum class Kind { kName, kString, kNumber, kOp, kEnd } kind;
    std::string text;
    nlohmann::json value;  // kString, kNumber
};

// A tag's tokens, ending with kEnd; `line` is for errors.
std::vector<Token> lex(std::string_view tag, int line);

struct Expr {
    enum class Kind {
        kLiteral,  // value
        kName,     // name
        kList,     // args: the elements
        kDict,     // args: key, value, key, value...
        kAttr,     // args[0].name
        kIndex,    // args[0][args[1]]
        kSlice,    // args[0][args[1]:args[2]:args[3]], a missing bound is null
        kCall,     // name(args) (a global), or args[0].name(args[1..]) (a method): see method
        kFilter,   // args[0] | name(args[1..])
        kTest,     // args[0] is [not] name (args[1..]); negate
        kUnary,    // op args[0]: "not", "-"
        kBinary,   // args[0] op args[1]: + - * / // % ~ == != < > <= >= in "not in" and or
        kIfElse,   // args[1] if args[0] else args[2] (null: undefined)
    };
    Kind kind;
    std::string name;  // a name, attribute, function, method, filter, test or operator
    nlohmann::json value;
    std::vector<std::unique_ptr<Expr>> args;
    bool method = false;  // kCall on args[0]
    bool negate = false;  // kTest
    int line = 0;         // of the template, for errors
};

struct Node {
    enum class Kind {
        kText,    // text
        kOutput,  // {{ expr }}
        kIf,      // branches: (cond or null for else, body)
        kFor,     // for name in expr: body
        kSet,     // set name = expr
    };
    Kind kind;
    std::string text;  // kText; the loop variable of kFor; the name of kSet
    std::unique_ptr<Expr> expr;
    std::vector<std::pair<std::unique_ptr<Expr>, std::vector<Node>>> branches;  // kIf
    std::vector<Node> body;                                                     // kFor
    int line = 0;
};

// The names of the subset (chat_template.cpp, which evaluates them): the parser refuses others.
bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);
bool is_function(std::string_view name);

// The template's nodes, or an error naming the first construct outside the subset and its line.
std::vector<Node> parse(std::string_view source);

}  // namespace weft::serve::jinja
