#include "weft/serve/json_schema.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"

namespace weft::serve {

namespace {

using ojson = nlohmann::ordered_json;

// Keywords that say what a value is for, not what it may be.
constexpr const char* kNotes[] = {"title",    "description", "$schema",
                                  "$comment", "examples",    "default"};

bool is_note(const std::string& k) {
    return std::any_of(std::begin(kNotes), std::end(kNotes), [&](const char* n) { return k == n; });
}

bool is_object_schema(const ojson& s) {
    return s.is_object() && s.value("type", ojson()) == "object";
}

}  // namespace

const SchemaNode& JsonSchema::keywords() {
    static const SchemaNode k{SchemaNode::Kind::kLiterals, {}, {}, {"true", "false", "null"}, {}};
    return k;
}

JsonSchema::JsonSchema(const ojson& schema) {
    WEFT_CHECK(is_object_schema(schema),
               "the JSON schema's root must be an object schema ({{\"type\": \"object\", ...}}), "
               "got {}",
               schema.dump());
    add(schema, "the schema", 1);
}

JsonSchema JsonSchema::one_call_of(const std::vector<std::string>& names,
                                   const std::vector<ojson>& parameters) {
    WEFT_CHECK(
        !names.empty() && names.size() == parameters.size() && int(names.size()) <= kMaxLiterals,
        "internal: a call of {} functions with {} parameter schemas (at most {})", names.size(),
        parameters.size(), kMaxLiterals);
    JsonSchema s;
    s.nodes_.emplace_back();
    s.nodes_.push_back({SchemaNode::Kind::kLiterals, {}, {}, {}, {}});
    SchemaNode call{SchemaNode::Kind::kObject, {"\"name\"", "\"arguments\""}, {1, -1}, {}, {}};
    for (size_t i = 0; i < names.size(); ++i) {
        const std::string where = fmt::format("function '{}''s parameters", names[i]);
        WEFT_CHECK(is_object_schema(parameters[i]),
                   "{} must be an object schema ({{\"type\": \"object\", ...}}), got {}", where,
                   parameters[i].dump());
        s.nodes_[1].literals.push_back(ojson(names[i]).dump());
        call.variants.push_back(s.add(parameters[i], where, 2));
    }
    s.nodes_[0] = std::move(call);
    return s;
}

int32_t JsonSchema::add(const ojson& s, const std::string& where, int depth) {
    WEFT_CHECK(s.is_object(), "{} must be a JSON schema object, got {}", where, s.dump());
    WEFT_CHECK(depth <= kMaxDepth, "{} nests deeper than {} levels", where, kMaxDepth);
    const int32_t at = int32_t(nodes_.size());
    nodes_.emplace_back();
    SchemaNode n;
    std::vector<std::string> allowed;  // the keywords this node's type reads
    auto literal_list = [&](const ojson& values, const char* name) {
        WEFT_CHECK(values.is_array() && !values.empty() && int(values.size()) <= kMaxLiterals,
                   "{}: '{}' must be a list of 1 to {} values, got {}", where, name, kMaxLiterals,
                   values.dump());
        for (const ojson& v : values) {
            WEFT_CHECK(!v.is_object() && !v.is_array(),
                       "{}: '{}' value {} is an object or array (expected strings, numbers, "
                       "booleans or null)",
                       where, name, v.dump());
            n.literals.push_back(v.dump());
        }
    };
    if (s.contains("enum") || s.contains("const")) {
        n.kind = SchemaNode::Kind::kLiterals;
        WEFT_CHECK(!(s.contains("enum") && s.contains("const")), "{}: both 'enum' and 'const'",
                   where);
        if (s.contains("enum")) literal_list(s.at("enum"), "enum");
        if (s.contains("const")) literal_list(ojson::array({s.at("const")}), "const");
        // A type beside them must hold for each value, or the text could break it.
        if (s.contains("type")) {
            const ojson& t = s.at("type");
            for (const std::string& v : n.literals) {
                const ojson value = ojson::parse(v);
                const bool fits = (t == "string" && value.is_string()) ||
                                  (t == "integer" && value.is_number_integer()) ||
                                  (t == "number" && value.is_number()) ||
                                  (t == "boolean" && value.is_boolean()) ||
                                  (t == "null" && value.is_null());
                WEFT_CHECK(fits, "{}: the value {} is not of its 'type' {}", where, v, t.dump());
            }
        }
        allowed = {"enum", "const", "type"};
    } else if (!s.contains("type")) {
        n.kind = SchemaNode::Kind::kAny;
    } else {
        const ojson& t = s.at("type");
        WEFT_CHECK(t.is_string(),
                   "{}: 'type' {} is not supported (expected one type as a string: object, array, "
                   "string, integer, number, boolean or null)",
                   where, t.dump());
        const std::string type = t.get<std::string>();
        if (type == "object") {
            n.kind = SchemaNode::Kind::kObject;
            allowed = {"properties", "required", "additionalProperties"};
            const ojson props = s.value("properties", ojson::object());
            WEFT_CHECK(props.is_object() && props.size() <= size_t(kMaxLiterals),
                       "{}: 'properties' must be an object of at most {} properties, got {}", where,
                       kMaxLiterals, props.dump());
            if (s.contains("additionalProperties"))
                WEFT_CHECK(s.at("additionalProperties").is_boolean(),
                           "{}: 'additionalProperties' {} is not supported (expected a boolean: "
                           "the properties listed are the ones written, either way)",
                           where, s.at("additionalProperties").dump());
            if (s.contains("required")) {
                WEFT_CHECK(s.at("required").is_array(), "{}: 'required' must be a list, got {}",
                           where, s.at("required").dump());
                for (const ojson& r : s.at("required"))
                    WEFT_CHECK(r.is_string() && props.contains(r.get<std::string>()),
                               "{}: 'required' names {}, which is not among its properties", where,
                               r.dump());
            }
            for (const auto& [key, value] : props.items()) {
                n.keys.push_back(ojson(key).dump());
                n.items.push_back(
                    add(value, where + "'s property " + ojson(key).dump(), depth + 1));
            }
        } else if (type == "array") {
            n.kind = SchemaNode::Kind::kArray;
            allowed = {"items"};
            WEFT_CHECK(s.contains("items"), "{}: an array schema needs 'items'", where);
            n.items.push_back(add(s.at("items"), where + "'s items", depth + 1));
        } else if (type == "string") {
            n.kind = SchemaNode::Kind::kString;
        } else if (type == "integer") {
            n.kind = SchemaNode::Kind::kInteger;
        } else if (type == "number") {
            n.kind = SchemaNode::Kind::kNumber;
        } else if (type == "boolean") {
            n.kind = SchemaNode::Kind::kLiterals;
            n.literals = {"true", "false"};
        } else if (type == "null") {
            n.kind = SchemaNode::Kind::kLiterals;
            n.literals = {"null"};
        } else {
            fail(
                "{}: 'type' \"{}\" is unknown (expected object, array, string, integer, number, "
                "boolean or null)",
                where, type);
        }
        allowed.push_back("type");
    }
    for (const auto& [key, value] : s.items())
        WEFT_CHECK(is_note(key) || std::find(allowed.begin(), allowed.end(), key) != allowed.end(),
                   "{}: the keyword '{}' is not enforced by this server (supported: type, "
                   "properties, required, additionalProperties, items, enum, const)",
                   where, key);
    nodes_[size_t(at)] = std::move(n);
    return at;
}

}  // namespace weft::serve
