#pragma once
// Tool calls a model writes in Hermes' format, which the chat templates of Qwen2.5, Hermes 2 and 3
// and SmolLM3 teach: each call a block
//
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Rome"}}
//   </tool_call>
//
// after any text. `weft serve --tool-call-parser hermes` reads them out of a chat's answer when
// the request leaves the model to decide (tool_choice "auto"), as vLLM's parser of that name.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weft::serve {

struct HermesCall {
    std::string name, arguments;  // arguments: the object's JSON text
};

struct HermesText {
    std::string content;     // the text before the first call (all of it when there is none)
    size_t content_end = 0;  // where the first call's tag begins in the text (its size: none)
    std::vector<HermesCall> calls;
};

// Whether `s` is only spaces, tabs and line breaks (a content of nothing but these is none).
bool only_whitespace(std::string_view s);

// The calls of a whole answer. Every block must be closed and hold a JSON object with a string
// "name" among `names` and an object "arguments"; otherwise the answer is taken as text (no
// calls), so that nothing the model wrote is lost.
HermesText parse_hermes(std::string_view text, const std::vector<std::string>& names);

// Of the text so far of a streamed answer, how many leading bytes are surely content: those
// before the first "<tool_call>", less a tail that could be its beginning.
size_t hermes_content_bytes(std::string_view text);

}  // namespace weft::serve
