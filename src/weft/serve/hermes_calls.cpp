#include "weft/serve/hermes_calls.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace weft::serve {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

std::string_view trimmed(std::string_view s) {
    const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

bool only_whitespace(std::string_view s) {
    return trimmed(s).empty();
}

HermesText parse_hermes(std::string_view text, const std::vector<std::string>& names) {
    const size_t first = text.find(kOpen);
    HermesText out{std::string(text), text.size(), {}};
    if (first == std::string_view::npos) return out;
    std::vector<HermesCall> calls;
    size_t at = first;
    while (at != std::string_view::npos) {
        const size_t body = at + kOpen.size(), end = text.find(kClose, body);
        if (end == std::string_view::npos) return out;
        const auto call =
            nlohmann::ordered_json::parse(trimmed(text.substr(body, end - body)), nullptr, false);
        const bool whole = call.is_object() && call.contains("name") && call["name"].is_string() &&
                           call.contains("arguments") && call["arguments"].is_object();
        if (!whole) return out;
        const std::string name = call["name"].get<std::string>();
        if (std::find(names.begin(), names.end(), name) == names.end()) return out;
        calls.push_back({name, call["arguments"].dump()});
        // Between and after the blocks only whitespace: text there would be lost.
        const size_t next = text.find(kOpen, end + kClose.size());
        const std::string_view between =
            text.substr(end + kClose.size(), (next == std::string_view::npos ? text.size() : next) -
                                                 (end + kClose.size()));
        if (!only_whitespace(between)) return out;
        at = next;
    }
    return {std::string(text.substr(0, first)), first, std::move(calls)};
}

size_t hermes_content_bytes(std::string_view text) {
    const size_t first = text.find(kOpen);
    if (first != std::string_view::npos) return first;
    // The longest tail that is a proper beginning of the tag waits for the next bytes.
    for (size_t n = std::min(text.size(), kOpen.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == kOpen.substr(0, n)) return text.size() - n;
    return text.size();
}

}  // namespace weft::serve
