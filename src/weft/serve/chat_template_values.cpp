// The values of chat templates and what the subset does to them: Jinja's (Python's) semantics
// where real templates depend on them (truthiness, undefined, str() and repr(), json.dumps,
// slices, floor division), and the filters, tests, methods and operators of the subset.
#include "weft/serve/chat_template_values.hpp"

#include <algorithm>
#include <cmath>

namespace weft::serve::jinja {

using nlohmann::json;

namespace {
constexpr std::string_view kFilters[] = {"trim",    "length", "count",   "tojson",    "upper",
                                         "lower",   "string", "first",   "last",      "join",
                                         "default", "d",      "replace", "capitalize"};
constexpr std::string_view kTests[] = {"defined", "undefined", "none",    "string",   "number",
                                       "integer", "boolean",   "mapping", "sequence", "iterable",
                                       "true",    "false",     "even",    "odd"};
constexpr std::string_view kMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith",
                                         "upper", "lower",  "split",  "replace",    "title",
                                         "keys",  "values", "get"};
constexpr std::string_view kFunctions[] = {"raise_exception"};

template <size_t N>
bool has(const std::string_view (&names)[N], std::string_view n) {
    return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

// Python's repr, for values inside a rendered list or dict.
std::string repr(const json& v) {
    if (!v.is_string()) return text_of(v);
    std::string s = "'";
    for (char c : v.get_ref<const std::string&>()) {
        if (c == '\'' || c == '\\') s += '\\';
        if (c == '\n')
            s += "\\n";
        else
            s += c;
    }
    return s + "'";
}

std::string strip(std::string s, bool left, bool right, std::string_view chars = " \t\n\r\f\v") {
    if (right) s.erase(s.find_last_not_of(chars) + 1);
    if (left) s.erase(0, std::min(s.size(), s.find_first_not_of(chars)));
    return s;
}

json join(const std::vector<std::string>& parts) {
    std::string s;
    for (const std::string& p : parts) s += p;
    return s;
}

}  // namespace

bool is_filter(std::string_view n) {
    return has(kFilters, n);
}
bool is_test(std::string_view n) {
    return has(kTests, n);
}
bool is_method(std::string_view n) {
    return has(kMethods, n);
}
bool is_function(std::string_view n) {
    return has(kFunctions, n);
}

// Jinja's Undefined: a missing name, key or index.
json undefined() {
    return json(json::value_t::discarded);
}
bool is_undefined(const json& v) {
    return v.is_discarded();
}

std::string type_of(const json& v) {
    return is_undefined(v) ? "undefined" : v.type_name();
}

bool truthy(const json& v) {
    if (is_undefined(v) || v.is_null()) return false;
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>() != 0;
    if (v.is_number_float()) return v.get<double>() != 0;
    if (v.is_string()) return !v.get_ref<const std::string&>().empty();
    return !v.empty();
}

std::string text_of(const json& v) {
    if (is_undefined(v)) return "";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (v.is_null()) return "None";
    if (v.is_number_float()) {
        std::string s = fmt::format("{}", v.get<double>());
        return s.find_first_of(".en") == std::string::npos ? s + ".0" : s;
    }
    if (v.is_number()) return std::to_string(v.get<int64_t>());
    std::string s = v.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false) {
        if (!first) s += ", ";
        if (v.is_object()) s += repr(it.key()) + ": ";
        s += repr(*it);
    }
    return s + (v.is_array() ? "]" : "}");
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent), as transformers' tojson calls it:
// ", " and ": " between items without an indent.
std::string to_json(const json& v, int indent, int depth) {
    if (!v.is_array() && !v.is_object())
        return v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (v.empty()) return v.is_array() ? "[]" : "{}";
    const std::string pad = indent < 0 ? "" : "\n" + std::string(size_t(indent * (depth + 1)), ' ');
    std::string s = v.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false) {
        s += first ? pad : (indent < 0 ? ", " : "," + pad);
        if (v.is_object()) s += json(it.key()).dump() + ": ";
        s += to_json(*it, indent, depth + 1);
    }
    if (indent >= 0) s += "\n" + std::string(size_t(indent * depth), ' ');
    return s + (v.is_array() ? "]" : "}");
}

// Code points of UTF-8 text: what Python's len() and indices count.
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (uint8_t(s[i + n]) & 0xC0) == 0x80) ++n;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

// v[key]: an object's member, a list's or a string's element (negative from the end);
// undefined when missing, an error on an undefined value (as Jinja's Undefined).
json item(const json& v, const json& key) {
    if (is_undefined(v)) throw ValueError(fmt::format("'{}' of an undefined value", text_of(key)));
    if (v.is_object() && key.is_string()) {
        auto it = v.find(key.get<std::string>());
        return it == v.end() ? undefined() : *it;
    }
    if ((v.is_array() || v.is_string()) && key.is_number_integer()) {
        const std::vector<std::string> cps =
            v.is_string() ? code_points(v.get<std::string>()) : std::vector<std::string>{};
        const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(cps.size());
        int64_t i = key.get<int64_t>();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undefined();
        return v.is_array() ? v[size_t(i)] : json(cps[size_t(i)]);
    }
    return undefined();
}

// v[start:stop:step] with Python's slice.indices: bounds past either end are clamped, negative
// ones count from the end.
json slice(const json& v, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
    if (!v.is_array() && !v.is_string()) throw ValueError("cannot slice a " + type_of(v));
    if (step == 0) throw ValueError("a slice step cannot be zero");
    const std::vector<std::string> cps =
        v.is_string() ? code_points(v.get<std::string>()) : std::vector<std::string>{};
    const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(cps.size());
    auto clamp = [&](int64_t i) {
        if (i < 0) i += n;
        return std::clamp(i, step > 0 ? int64_t(0) : int64_t(-1), step > 0 ? n : n - 1);
    };
    const int64_t from = start ? clamp(*start) : (step > 0 ? 0 : n - 1);
    const int64_t to = stop ? clamp(*stop) : (step > 0 ? n : -1);
    json out = json::array();
    std::vector<std::string> parts;
    for (int64_t i = from; step > 0 ? i < to : i > to; i += step) {
        if (v.is_array())
            out.push_back(v[size_t(i)]);
        else
            parts.push_back(cps[size_t(i)]);
    }
    return v.is_array() ? out : join(parts);
}

namespace {

// Argument i of `name` as a string, `fallback` when absent or none.
std::string string_arg(std::string_view name, const std::vector<json>& a, size_t i,
                       std::string fallback) {
    if (i >= a.size() || a[i].is_null()) return fallback;
    if (!a[i].is_string())
        throw ValueError(fmt::format("'{}' expects a string, got {}", name, text_of(a[i])));
    return a[i].get<std::string>();
}

std::string change_case(std::string s, bool upper, bool title) {
    bool start = true;
    for (char& c : s) {
        const bool alpha = std::isalpha(uint8_t(c)) != 0;
        if (title)
            c = char(start ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
        else
            c = char(upper ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
        start = !alpha;
    }
    return s;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    size_t pos = 0;
    for (size_t at; (at = s.find(from, pos)) != std::string::npos; pos = at + from.size())
        out += s.substr(pos, at - pos) + to;
    return out + s.substr(pos);
}

}  // namespace

json method(const std::string& m, const json& self, const std::vector<json>& a) {
    if (self.is_object()) {
        json out = json::array();
        if (m == "keys" || m == "values") {
            for (auto it = self.begin(); it != self.end(); ++it)
                out.push_back(m == "keys" ? json(it.key()) : *it);
            return out;
        }
        if (m == "get") {
            const json v = item(self, a.empty() ? json() : a[0]);
            return is_undefined(v) ? (a.size() > 1 ? a[1] : json()) : v;
        }
    }
    if (!self.is_string())
        throw ValueError(fmt::format("a {} has no method '{}()'", type_of(self), m));
    const std::string s = self.get<std::string>();
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string chars = string_arg(m, a, 0, " \t\n\r\f\v");
        return strip(s, m != "rstrip", m != "lstrip", chars);
    }
    if (m == "startswith") return s.starts_with(string_arg(m, a, 0, ""));
    if (m == "endswith") return s.ends_with(string_arg(m, a, 0, ""));
    if (m == "upper" || m == "lower") return change_case(s, m == "upper", false);
    if (m == "title") return change_case(s, false, true);
    if (m == "replace") return replace(s, string_arg(m, a, 0, ""), string_arg(m, a, 1, ""));
    if (m == "split") {
        const std::string sep = string_arg(m, a, 0, "");
        json out = json::array();
        if (sep.empty()) {  // Python's split(): runs of whitespace, none at the ends
            std::string word;
            for (char c : s + " ") {
                if (std::string_view(" \t\n\r\f\v").find(c) == std::string_view::npos) {
                    word += c;
                } else if (!word.empty()) {
                    out.push_back(word);
                    word.clear();
                }
            }
            return out;
        }
        size_t from = 0;
        for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + sep.size())
            out.push_back(s.substr(from, at - from));
        out.push_back(s.substr(from));
        return out;
    }
    throw ValueError(fmt::format("a string has no method '{}()'", m));
}

json filter(const std::string& f, const json& v, const std::vector<json>& a,
            const std::vector<std::string>& keywords) {
    if (f == "default" || f == "d") {
        const bool boolean = a.size() > 1 && truthy(a[1]);
        return is_undefined(v) || (boolean && !truthy(v)) ? (a.empty() ? json("") : a[0]) : v;
    }
    if (f == "tojson") {
        int indent = -1;
        for (size_t i = 0; i < a.size(); ++i)
            if ((keywords[i] == "indent" || keywords[i].empty()) && a[i].is_number_integer())
                indent = a[i].get<int>();
        if (is_undefined(v)) throw ValueError("tojson of an undefined value");
        return to_json(v, indent);
    }
    if (f == "string") return text_of(v);
    if (is_undefined(v)) throw ValueError(fmt::format("the filter '{}' of an undefined value", f));
    if (f == "length" || f == "count") {
        if (v.is_string()) return int64_t(code_points(v.get<std::string>()).size());
        if (v.is_array() || v.is_object()) return int64_t(v.size());
        throw ValueError(fmt::format("a {} has no length", type_of(v)));
    }
    if (f == "first" || f == "last") {
        if (v.is_array()) return v.empty() ? undefined() : (f == "first" ? v.front() : v.back());
        if (v.is_string()) {
            const std::vector<std::string> cps = code_points(v.get<std::string>());
            return cps.empty() ? undefined() : json(f == "first" ? cps.front() : cps.back());
        }
        throw ValueError(fmt::format("a {} has no '{}' element", type_of(v), f));
    }
    if (f == "join") {
        if (!v.is_array()) throw ValueError("join needs a list, got a " + type_of(v));
        const std::string sep = string_arg(f, a, 0, "");
        std::string s;
        for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + text_of(v[i]);
        return s;
    }
    const std::string s = text_of(v);
    if (f == "trim") return strip(s, true, true);
    if (f == "upper" || f == "lower") return change_case(s, f == "upper", false);
    if (f == "capitalize") {
        std::string c = change_case(s, false, false);
        if (!c.empty()) c[0] = char(std::toupper(uint8_t(c[0])));
        return c;
    }
    if (f == "replace") return replace(s, string_arg(f, a, 0, ""), string_arg(f, a, 1, ""));
    throw ValueError("the filter '" + f + "'");
}

bool test(const std::string& t, const json& v) {
    if (t == "defined") return !is_undefined(v);
    if (t == "undefined") return is_undefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "boolean") return v.is_boolean();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "true" || t == "false") return v.is_boolean() && v.get<bool>() == (t == "true");
    if (!v.is_number_integer()) throw ValueError(fmt::format("'is {}' of a {}", t, type_of(v)));
    return (v.get<int64_t>() % 2 == 0) == (t == "even");
}

json binary(const std::string& op, const json& a, const json& b) {
    if (op == "~") return text_of(a) + text_of(b);
    if (op == "==" || op == "!=") {
        const bool eq =
            is_undefined(a) || is_undefined(b) ? is_undefined(a) == is_undefined(b) : a == b;
        return eq == (op == "==");
    }
    if (op == "in" || op == "not in") {
        bool in = false;
        if (b.is_string() && a.is_string())
            in = b.get_ref<const std::string&>().find(a.get<std::string>()) != std::string::npos;
        else if (b.is_array())
            in = std::find(b.begin(), b.end(), a) != b.end();
        else if (b.is_object() && a.is_string())
            in = b.contains(a.get<std::string>());
        else
            throw ValueError(fmt::format("'{}' {} a {}", text_of(a), op, type_of(b)));
        return in == (op == "in");
    }
    const bool numbers = a.is_number() && b.is_number();
    const bool ints = numbers && a.is_number_integer() && b.is_number_integer();
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
        if (!numbers && !(a.is_string() && b.is_string()))
            throw ValueError(
                fmt::format("cannot compare a {} and a {} with '{}'", type_of(a), type_of(b), op));
        if (op == "<") return a < b;
        if (op == ">") return b < a;
        if (op == "<=") return !(b < a);
        return !(a < b);
    }
    if (op == "+" && a.is_string() && b.is_string())
        return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
        json out = a;
        out.insert(out.end(), b.begin(), b.end());
        return out;
    }
    if (op == "*" && a.is_string() && b.is_number_integer()) {
        std::string out;
        for (int64_t i = 0; i < b.get<int64_t>(); ++i) out += a.get<std::string>();
        return out;
    }
    if (!numbers)
        throw ValueError(fmt::format("cannot apply '{}' to a {} ({}) and a {} ({})", op, type_of(a),
                                     text_of(a), type_of(b), text_of(b)));
    const double x = a.get<double>(), y = b.get<double>();
    if ((op == "/" || op == "//" || op == "%") && y == 0) throw ValueError("division by zero");
    if (op == "/") return x / y;
    if (ints) {
        const int64_t i = a.get<int64_t>(), j = b.get<int64_t>();
        if (op == "+") return i + j;
        if (op == "-") return i - j;
        if (op == "*") return i * j;
        const int64_t q = i / j - ((i % j != 0) && ((i < 0) != (j < 0)));  // floor, as Python
        if (op == "//") return q;
        return i - q * j;
    }
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "//") return std::floor(x / y);
    return x - std::floor(x / y) * y;
}

}  // namespace weft::serve::jinja
