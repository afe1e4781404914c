#include "weft/serve/tool_calls.hpp"

#include <algorithm>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/serve/hermes_calls.hpp"
#include "weft/serve/openai.hpp"

namespace weft::serve {

using nlohmann::json;

namespace {

using ojson = nlohmann::ordered_json;

ApiError tool_error(std::string message, const char* param, const char* code = "invalid_value") {
    return {400, std::move(message), "invalid_request_error", param, code};
}

// OpenAI's rule for a function's name.
bool valid_function_name(const std::string& n) {
    return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-';
    });
}

// {"type": "function", "function": {"name": "...", ...}}: a tool, and a tool_choice naming one.
template <class J>
bool names_a_function(const J& v) {
    return v.is_object() && v.value("type", J()) == "function" && v.contains("function") &&
           v["function"].is_object() && v["function"].contains("name") &&
           v["function"]["name"].is_string();
}

// One entry of a message's tool_calls.
json call_json(const std::string& id, const std::string& name, const std::string& arguments) {
    return {
        {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

// A function without `parameters` takes none: its arguments are {}.
ojson parameters_of(const ojson& function) {
    auto it = function.find("parameters");
    if (it == function.end() || it->is_null())
        return ojson{{"type", "object"}, {"properties", ojson::object()}};
    return *it;
}

}  // namespace

ToolChoice parse_tool_choice(const json& body, const std::string& text, const std::string& parser) {
    ToolChoice t;
    auto tools_it = body.find("tools");
    const bool any = tools_it != body.end() && !tools_it->is_null() &&
                     !(tools_it->is_array() && tools_it->empty());
    auto choice_it = body.find("tool_choice");
    const json choice =
        choice_it == body.end() || choice_it->is_null() ? json(any ? "auto" : "none") : *choice_it;
    if (!any) {
        if (choice != "none")
            throw tool_error(fmt::format("'tool_choice' {} without 'tools' (expected \"none\", or "
                                         "the functions in 'tools')",
                                         choice.dump()),
                             "tool_choice");
        return t;
    }
    // Parsed again in order: the properties of each function's parameters are written so.
    const ojson tools = ojson::parse(text)["tools"];
    if (!tools.is_array() || int(tools.size()) > JsonSchema::kMaxLiterals)
        throw tool_error(fmt::format("'tools' must be a list of at most {} functions, got {}",
                                     JsonSchema::kMaxLiterals, tools.dump()),
                         "tools", "invalid_type");
    std::vector<std::string> names;
    std::vector<ojson> parameters;
    std::vector<std::shared_ptr<const JsonSchema>> schemas;
    for (size_t i = 0; i < tools.size(); ++i) {
        const ojson& tool = tools[i];
        if (!names_a_function(tool))
            throw tool_error(fmt::format("'tools'[{}] must be {{\"type\": \"function\", "
                                         "\"function\": {{\"name\": ..., \"parameters\": ...}}}}, "
                                         "got {}",
                                         i, tool.dump()),
                             "tools", "invalid_type");
        const ojson& f = tool["function"];
        const std::string name = f["name"].get<std::string>();
        if (!valid_function_name(name))
            throw tool_error(
                fmt::format("'tools'[{}]'s name \"{}\" must be 1 to 64 letters, digits, "
                            "'_' or '-'",
                            i, name),
                "tools");
        if (std::find(names.begin(), names.end(), name) != names.end())
            throw tool_error(fmt::format("'tools' names the function \"{}\" twice", name), "tools");
        names.push_back(name);
        parameters.push_back(parameters_of(f));
        try {  // every function's, called or not: a tool the server could not call is an error
            schemas.push_back(std::make_shared<const JsonSchema>(parameters.back()));
        } catch (const Error& e) {
            throw tool_error(
                fmt::format("'tools'[{}] (\"{}\")'s parameters: {}", i, name, e.what()), "tools");
        }
    }
    t.tools = body["tools"];
    t.names = names;
    if (choice == "none") return t;
    if (choice == "required") {
        t.kind = ToolChoice::Kind::kRequired;
        t.schema = std::make_shared<const JsonSchema>(JsonSchema::one_call_of(names, parameters));
        return t;
    }
    if (choice == "auto" && parser != "none") {
        t.kind = ToolChoice::Kind::kAuto;
        return t;
    }
    if (choice == "auto")
        throw tool_error(
            fmt::format("'tool_choice' \"auto\"{} is not supported by this server: whether to "
                        "call is written in each model's own format, which it parses only when "
                        "started with --tool-call-parser (expected \"none\", \"required\", or "
                        "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}} naming one of "
                        "{})",
                        choice_it == body.end() || choice_it->is_null()
                            ? " (the default with 'tools')"
                            : "",
                        json(names).dump()),
            "tool_choice", "unsupported_parameter");
    if (!names_a_function(choice))
        throw tool_error(fmt::format("'tool_choice' must be \"none\", \"required\" or {{\"type\": "
                                     "\"function\", \"function\": {{\"name\": ...}}}}, got {}",
                                     choice.dump()),
                         "tool_choice");
    t.name = choice["function"]["name"].get<std::string>();
    auto at = std::find(names.begin(), names.end(), t.name);
    if (at == names.end())
        throw tool_error(fmt::format("'tool_choice' names the function \"{}\", which is not in "
                                     "'tools' (expected one of {})",
                                     t.name, json(names).dump()),
                         "tool_choice");
    t.kind = ToolChoice::Kind::kNamed;
    t.schema = schemas[size_t(at - names.begin())];
    return t;
}

json tool_calls_json(const ToolChoice& t, const std::string& text, const std::string& id) {
    std::string name = t.name, arguments = text;
    if (t.kind == ToolChoice::Kind::kRequired) {
        const ojson call = ojson::parse(text, nullptr, false);
        if (call.is_discarded()) return nullptr;
        name = call.at("name").get<std::string>();
        arguments = call.at("arguments").dump();
    }
    return json::array({call_json(id, name, arguments)});
}

namespace {

// A forced tool call's message, or its stream's delta. A named call streams its arguments as
// they come; "required" holds its text until the call is whole, since its name comes first
// and is known only when it is written out. Its finish is "tool_calls" ("required"), or "stop"
// (a named function, as OpenAI answers a call it forced), unless max_tokens or a stop string
// cut it.
void forced_call_choice(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s,
                        const std::string& text, json& choice) {
    const std::string id = fmt::format("call_{}_{}", r.call_id, c);
    const bool required = r.tools.kind == ToolChoice::Kind::kRequired;
    // A whole call of "required" (not one a stop string cut) finishes as "tool_calls".
    auto finished = [&](const json& calls) {
        if (required && !calls.is_null() && u.finish_reason == "stop")
            choice["finish_reason"] = "tool_calls";
    };
    if (!r.stream) {
        const json calls = tool_calls_json(r.tools, text, id);
        choice["message"] =
            calls.is_null()
                ? json{{"role", "assistant"}, {"content", text}}
                : json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}};
        if (u.done()) finished(calls);
        return;
    }
    json delta = json::object();
    if (s.first) delta["role"] = "assistant", delta["content"] = nullptr;
    if (!required) {
        json call = {{"index", 0}, {"function", {{"arguments", text}}}};
        if (s.first)
            call["id"] = id, call["type"] = "function", call["function"]["name"] = r.tools.name;
        delta["tool_calls"] = json::array({call});
    } else {
        s.held += text;
        if (u.done()) {
            json calls = tool_calls_json(r.tools, s.held, id);
            finished(calls);
            if (calls.is_null()) {
                delta["content"] = s.held;
            } else {
                calls[0]["index"] = 0;
                delta["tool_calls"] = calls;
            }
        }
    }
    choice["delta"] = delta;
}

// Under "auto" the model's own calls (hermes_calls.hpp) read out of its text: the text before
// them is the content, and a text with calls finishes as "tool_calls". Streamed, content goes
// out as it comes up to where a call could begin; the calls, read once the text is whole, go
// out in the last delta.
void auto_call_choice(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s,
                      const std::string& text, json& choice) {
    auto calls_json = [&](const HermesText& h) {
        json calls = json::array();
        for (size_t k = 0; k < h.calls.size(); ++k)
            calls.push_back(call_json(fmt::format("call_{}_{}_{}", r.call_id, c, k),
                                      h.calls[k].name, h.calls[k].arguments));
        if (u.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
        return calls;
    };
    if (!r.stream) {
        const HermesText h = parse_hermes(text, r.tools.names);
        if (h.calls.empty()) {
            choice["message"] = {{"role", "assistant"}, {"content", text}};
            return;
        }
        choice["message"] = {
            {"role", "assistant"},
            {"content", only_whitespace(h.content) ? json(nullptr) : json(h.content)},
            {"tool_calls", calls_json(h)}};
        return;
    }
    json delta = json::object();
    if (s.first) delta["role"] = "assistant";
    s.held += text;
    size_t upto = u.done() ? s.held.size() : hermes_content_bytes(s.held);
    if (u.done()) {
        const HermesText h = parse_hermes(s.held, r.tools.names);
        if (!h.calls.empty()) {
            upto = h.content_end;
            json calls = calls_json(h);
            for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
            delta["tool_calls"] = calls;
        }
    }
    if (upto > s.released) delta["content"] = s.held.substr(s.released, upto - s.released);
    s.released = std::max(s.released, upto);
    choice["delta"] = delta;
}

}  // namespace

void tool_choice_json(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s,
                      const std::string& text, json& choice) {
    if (r.tools.forced())
        forced_call_choice(r, c, u, s, text, choice);
    else
        auto_call_choice(r, c, u, s, text, choice);
}

}  // namespace weft::serve
