#pragma once
// OpenAI's function calling on /v1/chat/completions: `tools` (functions whose `parameters` are
// JSON schemas) and `tool_choice`. A call the request forces (a named function, or "required":
// one of the tools) is generated under structured outputs (json_schema.hpp), so that its
// arguments are always an instance of the function's parameters, as vLLM serves these two; with
// "none" the tools reach the chat template only. "auto", where the model itself decides whether
// to call, needs a parser of the model's own call format (`weft serve --tool-call-parser
// hermes`, as vLLM's flag of that name): without one it is refused by name.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/serve/json_schema.hpp"

namespace weft::serve {

struct ApiRequest;
struct ChoiceSent;
struct Update;

struct ToolChoice {
    enum class Kind : uint8_t { kNone, kNamed, kRequired, kAuto };
    Kind kind = Kind::kNone;
    std::string name;                // kNamed: the function
    std::vector<std::string> names;  // every function's, in order
    // The tools as sent, for the chat template's `tools` (null: none sent).
    nlohmann::json tools;
    // What a forced call writes: kNamed its arguments object; kRequired {"name": ...,
    // "arguments": {...}}.
    std::shared_ptr<const JsonSchema> schema;
    bool forced() const { return kind == Kind::kNamed || kind == Kind::kRequired; }
};

// From a chat body's `tools` and `tool_choice`; `text` is the body as sent (a schema's properties
// are written in its order); `parser` the server's --tool-call-parser ("none": "auto" is
// refused). Throws ApiError naming the field, the value and what was expected.
ToolChoice parse_tool_choice(const nlohmann::json& body, const std::string& text,
                             const std::string& parser);

// The assistant message's `tool_calls` (one call, whose `id` is given) of a forced call's
// generated `text`. Null when "required" was cut short (by max_tokens) before its text was a
// whole call: the name and the arguments cannot then be told apart, and the answer carries the
// text as content. A named call cut short carries its arguments as far as they were written,
// as OpenAI's does.
nlohmann::json tool_calls_json(const ToolChoice& t, const std::string& text, const std::string& id);

// Choice c's message (or, streamed, its delta `u` after what `s` says went before) of a chat
// whose tool_choice is not "none", into `choice` (whose index, logprobs and finish_reason are
// set; a call's finish may become "tool_calls"). A forced call's id is "call_<r.call_id>_<c>",
// the k-th call the model wrote under "auto" "call_<r.call_id>_<c>_<k>".
// - Named: the message has content null and the call; streamed, the first delta names the call
//   and each later one carries the arguments' next text.
// - "required": the call is whole only once written (its name comes first), so a stream sends
//   it in its last delta; finish "tool_calls", unless max_tokens or a stop string cut it, when
//   the text is the content.
// - "auto": the calls read out of the text (hermes_calls.hpp) after its content, finish
//   "tool_calls"; a text without whole calls is content. Streamed, the content goes out as it
//   comes, up to where a call could begin; the calls in the last delta.
void tool_choice_json(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s,
                      const std::string& text, nlohmann::json& choice);

}  // namespace weft::serve
