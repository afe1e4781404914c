#pragma once
// The JSON schemas of OpenAI's structured outputs (`"response_format": {"type": "json_schema",
// "json_schema": {"schema": ...}}`) that JSON mode's reader (json_prefix.hpp) enforces, compiled
// to a tree of nodes: objects whose properties all come, in the schema's order (OpenAI's strict
// mode asks every property to be required; one that is not is written anyway, which the schema
// allows), arrays of one item schema, strings, integers, numbers, and values out of a list
// (`enum`, `const`, booleans, null). A keyword that would constrain the text in a way the reader
// does not enforce (`pattern`, `minItems`, `anyOf`, `$ref`, ...) is refused by name rather than
// ignored: what the server writes then always satisfies the schema it accepted.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace weft::serve {

struct SchemaNode {
    enum class Kind : uint8_t { kAny, kObject, kArray, kString, kInteger, kNumber, kLiterals };
    Kind kind = Kind::kAny;
    // kObject: each property's key as JSON writes it (quotes and escapes included) and its
    // node, in order. kArray: items[0] is the elements' node.
    std::vector<std::string> keys;
    std::vector<int32_t> items;
    // kLiterals: the values allowed, each as nlohmann::json::dump writes it (at most
    // kMaxLiterals).
    std::vector<std::string> literals;
    // A kObject of two properties whose first one's value, one of its node's literals, chooses
    // the node of the second: variants[i] after literal i (a tool call's name and arguments).
    std::vector<int32_t> variants;
};

class JsonSchema {
  public:
    // Objects and arrays nested at most this deep; values of a list at most this many.
    static constexpr int kMaxDepth = 16;
    static constexpr int kMaxLiterals = 64;

    // An error (weft::Error) naming the first keyword, type or shape the reader cannot enforce,
    // or a root that is not an object. Ordered: the properties come in the order written.
    explicit JsonSchema(const nlohmann::ordered_json& schema);
    // A call of one of several functions: {"name": one of `names`, "arguments": an instance of
    // that function's `parameters` (object schemas, as the constructor takes)}, the keys in that
    // order. An error names the function whose parameters it cannot enforce.
    static JsonSchema one_call_of(const std::vector<std::string>& names,
                                  const std::vector<nlohmann::ordered_json>& parameters);
    const SchemaNode& node(int32_t i) const { return nodes_[size_t(i)]; }
    int32_t root() const { return 0; }
    // The node of true, false and null, for values that no schema constrains.
    static const SchemaNode& keywords();

  private:
    JsonSchema() = default;
    int32_t add(const nlohmann::ordered_json& s, const std::string& where, int depth);
    std::vector<SchemaNode> nodes_;
};

}  // namespace weft::serve
