#pragma once
// The OpenAI API's shapes, without sockets: a request body checked and turned into an engine
// Request, and the engine's output turned into the JSON the official clients expect (a
// completion, a chat completion, their stream chunks, an error object).
#include <nlohmann/json.hpp>
#include <string>

#include "weft/data/tokenizer.hpp"
#include "weft/serve/chat_format.hpp"
#include "weft/serve/engine.hpp"
#include "weft/serve/tool_calls.hpp"

namespace weft::serve {

// A 4xx answer: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
    int status;
    std::string message, type, param, code;
    nlohmann::json body() const;
};

// What the front needs to check and shape requests.
struct ApiContext {
    std::string model_id;  // the one name /v1/models lists
    const data::Tokenizer& tok;
    const Engine& engine;
    const ChatFormat& chat;  // how /v1/chat/completions turns messages into a prompt
    // How tool calls are read out of a chat's text under tool_choice "auto": "hermes"
    // (hermes_calls.hpp), or "none" (then "auto" is refused).
    std::string tool_call_parser = "none";
};

struct ApiRequest {
    bool chat = false, stream = false;
    bool logprobs = false;
    // Completions' `echo`: each choice's text, and its logprobs with `logprobs`, begin with its
    // prompt (the first prompt token with a null log-probability, as OpenAI's).
    bool echo = false;
    // The engine requests, `n` of each prompt (a completion's `prompt` may be several), prompt
    // by prompt: the answer's choice c is choices[c]'s.
    std::vector<Request> choices;
    static constexpr int64_t kMaxChoices = 128;  // OpenAI's largest `n`
    // Completions' `best_of` B >= n: B choices of each prompt run (choices holds B a prompt), and
    // the answer gives the n with the largest sums of their tokens' log-probabilities.
    int64_t n = 1, best_of = 1;
    // A chat's tools, and the call it forces (whose text is then the call's JSON). call_id is
    // unique to the request: choice c's call is "call_<call_id>_<c>".
    ToolChoice tools;
    std::string call_id;
};

// What a stream has sent of one choice.
struct ChoiceSent {
    bool first = true;   // no chunk yet: a chat's first delta names the role
    int64_t echoed = 0;  // prompt tokens sent with `echo`
    int64_t offset = 0;  // bytes of the tokens whose log-probabilities were sent
    int64_t prompt_tokens = 0, completion_tokens = 0;  // its latest counts, for the usage
    bool done = false;
    // The text of a "required" tool call, streamed once whole; under "auto", the whole text so
    // far, of which `released` bytes went out as content.
    std::string held;
    size_t released = 0;
};
// Whether every choice has sent its last chunk.
bool all_sent(const std::vector<ChoiceSent>& sent);

// The prompt of a chat's `messages` (chat_messages.hpp) and `tools` (null: none) by the server's
// chat template; throws ApiError.
std::string chat_prompt(const nlohmann::json& messages, const ChatFormat& chat,
                        const nlohmann::json& tools = nullptr);

// Parses and checks a /v1/completions (chat: /v1/chat/completions) body; throws ApiError.
ApiRequest parse_request(const std::string& body, bool chat, const ApiContext& ctx);

// The whole answer of a non-streaming request, from each choice's updates merged.
nlohmann::json completion_json(const ApiRequest& r, const std::vector<Update>& all,
                               const std::string& id, int64_t created, const ApiContext& ctx);
// One server-sent event's JSON of a stream: choice c's delta `u`, after what `sent` says went
// before (which it updates). The event that ends the last choice carries the usage.
nlohmann::json chunk_json(const ApiRequest& r, size_t c, const Update& u,
                          std::vector<ChoiceSent>& sent, const std::string& id, int64_t created,
                          const ApiContext& ctx);

// JSON text that never throws on bytes that are not UTF-8 (a token may end mid-character):
// those are replaced by U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace weft::serve
