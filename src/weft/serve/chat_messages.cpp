#include "weft/serve/chat_messages.hpp"

#include <string>

#include "weft/serve/openai.hpp"

namespace weft::serve {

using nlohmann::json;

namespace {

ApiError message_error(size_t i, const std::string& what, const json& m) {
    return {400, fmt::format("messages[{}] {}, got {}", i, what, m.dump()), "invalid_request_error",
            "messages", "invalid_type"};
}

// A content's text: a string, or the texts of a list of text parts joined by newlines.
std::string content_text(size_t i, const json& m) {
    const json& c = m["content"];
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array())
        throw message_error(i, "'content' must be a string or a list of text parts", m);
    std::string text;
    for (size_t k = 0; k < c.size(); ++k) {
        const json& part = c[k];
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            throw message_error(i,
                                fmt::format("content part {} must be an object with a string "
                                            "'type'",
                                            k),
                                m);
        if (part["type"] != "text")
            throw ApiError{400,
                           fmt::format("messages[{}] content part {} is of type {}, which this "
                                       "server does not read (expected \"text\")",
                                       i, k, part["type"].dump()),
                           "invalid_request_error", "messages", "unsupported_content"};
        if (!part.contains("text") || !part["text"].is_string())
            throw message_error(i, fmt::format("text part {} must have a string 'text'", k), m);
        if (k > 0) text += '\n';
        text += part["text"].get<std::string>();
    }
    return text;
}

json tool_calls(size_t i, const json& m) {
    const json& calls = m["tool_calls"];
    if (!calls.is_array()) throw message_error(i, "'tool_calls' must be a list of calls", m);
    json out = json::array();
    for (const json& c : calls) {
        const bool shaped = c.is_object() && c.contains("function") && c["function"].is_object() &&
                            c["function"].contains("name") && c["function"]["name"].is_string() &&
                            c["function"].contains("arguments") &&
                            c["function"]["arguments"].is_string();
        if (!shaped)
            throw message_error(i,
                                "each of 'tool_calls' must be {\"id\": ..., \"type\": "
                                "\"function\", \"function\": {\"name\": ..., \"arguments\": "
                                "\"<JSON text>\"}}",
                                m);
        json call = c;
        const json args =
            json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
        if (!args.is_discarded()) call["function"]["arguments"] = args;
        out.push_back(std::move(call));
    }
    return out;
}

}  // namespace

json chat_messages(const json& messages) {
    if (!messages.is_array() || messages.empty())
        throw ApiError{400,
                       fmt::format("'messages' must be a non-empty array, got {}", messages.dump()),
                       "invalid_request_error", "messages", "invalid_type"};
    json out = json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        const json& m = messages[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw message_error(i, "must be an object with a string 'role'", m);
        const std::string role = m["role"].get<std::string>();
        json n = m;
        const bool calls =
            role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
        if (calls) n["tool_calls"] = tool_calls(i, m);
        if (m.contains("content") && !m["content"].is_null())
            n["content"] = content_text(i, m);
        else if (calls)
            n["content"] = "";
        else
            throw message_error(
                i, "must have a string 'content' (or, an assistant's, 'tool_calls')", m);
        if (role == "tool" && !(m.contains("tool_call_id") && m["tool_call_id"].is_string()))
            throw message_error(i, "(a tool's result) must have a string 'tool_call_id'", m);
        out.push_back(std::move(n));
    }
    return out;
}

}  // namespace weft::serve
