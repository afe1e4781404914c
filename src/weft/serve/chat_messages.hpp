#pragma once
// A chat request's `messages` as OpenAI's API sends them, checked and put in the shape chat
// templates read (as transformers' apply_chat_template and vLLM give them): every message an
// object with a string `role` and a string `content`, where
// - content sent as a list of parts ({"type": "text", "text": ...}) is their texts joined by
//   newlines (vLLM's joining); any other part (an image) is refused by its type;
// - an assistant's `tool_calls` ({"id", "type": "function", "function": {"name", "arguments"}})
//   are kept, each call's `arguments` parsed from its JSON text into the value (templates write
//   it with tojson), and its absent or null content is "";
// - a `tool` message (a call's result) has a string `tool_call_id`.
#include <nlohmann/json.hpp>

namespace weft::serve {

// Throws ApiError (param "messages") naming the message and what was expected.
nlohmann::json chat_messages(const nlohmann::json& messages);

}  // namespace weft::serve
