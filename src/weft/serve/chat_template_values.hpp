#pragma once
// The values a chat template computes with (JSON, plus Jinja's Undefined) and the operations of
// the subset on them: chat_template_values.cpp, for the evaluator (chat_template.cpp). Not for
// use outside those files.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::serve::jinja {

using nlohmann::json;

// An operation on values it does not apply to; the evaluator adds the template's line.
class ValueError : public Error {
  public:
    using Error::Error;
};

// Jinja's Undefined (a missing name, key or index): falsy, rendered as nothing.
json undefined();
bool is_undefined(const json& v);
std::string type_of(const json& v);  // "undefined", "string", "number", ...
bool truthy(const json& v);          // Python's bool()
std::string text_of(const json& v);  // what {{ v }} writes: Python's str()
// Python's json.dumps(v, ensure_ascii=False, indent=indent) (-1: none), as transformers'
// tojson calls it; objects' keys in sorted order (nlohmann::json keeps no other).
std::string to_json(const json& v, int indent, int depth = 0);
// The code points of UTF-8 text: what Python's len() and indices count.
std::vector<std::string> code_points(const std::string& s);

// v[key]: an object's member, a list's or a string's element (negative from the end);
// undefined when missing, an error on an undefined v.
json item(const json& v, const json& key);
json slice(const json& v, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
// self.m(a...), v | f(a...) (`keywords` names each argument, "" when positional), v is t, and
// a op b for every operator but the short-circuit `and` and `or`.
json method(const std::string& m, const json& self, const std::vector<json>& a);
json filter(const std::string& f, const json& v, const std::vector<json>& a,
            const std::vector<std::string>& keywords);
bool test(const std::string& t, const json& v);
json binary(const std::string& op, const json& a, const json& b);

}  // namespace weft::serve::jinja
