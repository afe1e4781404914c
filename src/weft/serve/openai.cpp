#include "weft/serve/openai.hpp"

#include "weft/core/error.hpp"

namespace weft::serve {

using nlohmann::json;

namespace {

ApiError invalid(std::string message, std::string param, std::string code = "invalid_value") {
    return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

// The field `name` of the body as T, or `fallback` when absent or null; a wrong type is an error
// naming the field and the type expected.
template <typename T>
T field(const json& body, const char* name, T fallback, const char* expected) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return fallback;
    const bool ok = std::is_same_v<T, bool>       ? it->is_boolean()
                    : std::is_integral_v<T>       ? it->is_number_integer()
                    : std::is_floating_point_v<T> ? it->is_number()
                                                  : it->is_string();
    if (!ok)
        throw invalid(fmt::format("'{}' must be {}, got {}", name, expected, it->dump()), name,
                      "invalid_type");
    return it->get<T>();
}

std::vector<int32_t> prompt_ids(const json& body, const ApiContext& ctx) {
    auto it = body.find("prompt");
    if (it == body.end()) throw invalid("'prompt' is required", "prompt", "missing_field");
    if (it->is_string()) return ctx.tok.encode(it->get<std::string>());
    if (!it->is_array())
        throw invalid(
            fmt::format("'prompt' must be a string or an array of token ids, got {}", it->dump()),
            "prompt", "invalid_type");
    std::vector<int32_t> ids;
    for (const json& x : *it) {
        if (!x.is_number_integer())
            throw invalid(fmt::format("'prompt' must be a string or an array of token ids, got "
                                      "the element {}",
                                      x.dump()),
                          "prompt", "invalid_type");
        const int64_t id = x.get<int64_t>();
        const int64_t V = ctx.engine.config().vocab_size;
        if (id < 0 || id >= V)
            throw invalid(fmt::format("prompt token id {} is outside the model's vocabulary "
                                      "(expected ids in [0, {}))",
                                      id, V),
                          "prompt");
        ids.push_back(int32_t(id));
    }
    return ids;
}

std::vector<std::string> stop_strings(const json& body) {
    auto it = body.find("stop");
    if (it == body.end() || it->is_null()) return {};
    std::vector<std::string> stops;
    const json list = it->is_string() ? json::array({*it}) : *it;
    if (!list.is_array())
        throw invalid(
            fmt::format("'stop' must be a string or an array of strings, got {}", it->dump()),
            "stop", "invalid_type");
    for (const json& s : list) {
        if (!s.is_string() || s.get<std::string>().empty())
            throw invalid(fmt::format("'stop' must hold non-empty strings, got {}", s.dump()),
                          "stop");
        stops.push_back(s.get<std::string>());
    }
    return stops;
}

// Fields of OpenAI's API that this server does not implement, each with its neutral value: a
// client may send that (or null), anything else is refused rather than ignored, since each would
// change what the client gets.
void refuse_unsupported(const json& body) {
    struct Unsupported {
        const char* name;
        json neutral;
        const char* why;
    };
    static const Unsupported fields[] = {
        {"n", 1, "one choice a request"},
        {"best_of", 1, "one choice a request"},
        {"repetition_penalty", 1, "OpenAI's frequency and presence penalties only"},
        {"logit_bias", json::object(), "no logit bias"},
        {"echo", false, "no echo of the prompt"},
        {"suffix", "", "no suffix"},
        {"response_format", {{"type", "text"}}, "text only"},
        {"tools", json::array(), "no tool calls"},
        {"functions", json::array(), "no function calls"},
    };
    for (const Unsupported& f : fields) {
        auto it = body.find(f.name);
        if (it == body.end() || it->is_null() || *it == f.neutral) continue;
        throw ApiError{400,
                       fmt::format("'{}' {} is not supported by this server ({}: expected {} or "
                                   "no '{}')",
                                   f.name, it->dump(), f.why, f.neutral.dump(), f.name),
                       "invalid_request_error", f.name, "unsupported_parameter"};
    }
}

json usage(const Update& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// A token's text as the chat API's `bytes`: its UTF-8 bytes, which may end mid-character.
json token_bytes(const std::string& text) {
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(int(c));
    return bytes;
}

json logprobs_json(const ApiRequest& r, const Update& u, const ApiContext& ctx) {
    if (!r.logprobs) return nullptr;
    json tokens = json::array(), lps = json::array();
    for (size_t i = 0; i < u.tokens.size(); ++i) {
        tokens.push_back(ctx.tok.decode_token(u.tokens[i]));
        lps.push_back(u.logprobs[i]);
    }
    // Each token's alternatives (none unless asked for).
    auto top = [&](size_t i) -> const std::vector<model::TokenLogprob>& {
        static const std::vector<model::TokenLogprob> none;
        return i < u.top_logprobs.size() ? u.top_logprobs[i] : none;
    };
    if (!r.chat) {
        // The legacy shape: per token an object from token text to log-probability (its keys
        // come out sorted, not by likelihood). Two ids of the same text keep the likelier.
        json tops = json::array();
        for (size_t i = 0; i < u.tokens.size(); ++i) {
            json alternatives = json::object();
            for (const model::TokenLogprob& t : top(i)) {
                const std::string text = ctx.tok.decode_token(t.id);
                if (!alternatives.contains(text)) alternatives[text] = t.logprob;
            }
            tops.push_back(r.req.top_logprobs > 0 ? alternatives : json(nullptr));
        }
        return {{"tokens", tokens},
                {"token_logprobs", lps},
                {"top_logprobs", tops},
                {"token_ids", u.tokens}};
    }
    json content = json::array();
    for (size_t i = 0; i < u.tokens.size(); ++i) {
        json alternatives = json::array();
        for (const model::TokenLogprob& t : top(i)) {
            const std::string text = ctx.tok.decode_token(t.id);
            alternatives.push_back({{"token", text},
                                    {"logprob", t.logprob},
                                    {"bytes", token_bytes(text)},
                                    {"token_id", t.id}});
        }
        content.push_back({{"token", tokens[i]},
                           {"logprob", lps[i]},
                           {"bytes", token_bytes(tokens[i].get<std::string>())},
                           {"token_id", u.tokens[i]},
                           {"top_logprobs", alternatives}});
    }
    return {{"content", content}};
}

json finish(const Update& u) {
    return u.done() ? json(u.finish_reason) : json(nullptr);
}

}  // namespace

json ApiError::body() const {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string chat_prompt(const json& messages, const ChatFormat& chat) {
    if (!messages.is_array() || messages.empty())
        throw invalid(fmt::format("'messages' must be a non-empty array, got {}", messages.dump()),
                      "messages", "invalid_type");
    for (const json& m : messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string())
            throw invalid(fmt::format("each message must be an object with string 'role' and "
                                      "'content', got {}",
                                      m.dump()),
                          "messages", "invalid_type");
    }
    try {
        return chat.render(messages);
    } catch (const TemplateRaised& e) {
        throw invalid(fmt::format("the model's chat template refuses these messages: {}", e.what()),
                      "messages");
    } catch (const Error& e) {
        throw invalid(fmt::format("the chat template cannot render these messages: {}", e.what()),
                      "messages");
    }
}

ApiRequest parse_request(const std::string& text, bool chat, const ApiContext& ctx) {
    json body;
    try {
        body = json::parse(text);
    } catch (const json::parse_error& e) {
        throw invalid(fmt::format("the body is not valid JSON: {}", e.what()), "", "invalid_json");
    }
    if (!body.is_object())
        throw invalid(fmt::format("the body must be a JSON object, got {}", body.dump()), "",
                      "invalid_json");
    refuse_unsupported(body);
    const std::string model = field<std::string>(body, "model", ctx.model_id, "a string");
    if (model != ctx.model_id)
        throw ApiError{404,
                       fmt::format("the model '{}' does not exist (this server has '{}')", model,
                                   ctx.model_id),
                       "invalid_request_error", "model", "model_not_found"};
    ApiRequest r;
    r.chat = chat;
    r.stream = field<bool>(body, "stream", false, "a boolean");
    model::SampleOptions& o = r.req.o;
    // OpenAI's default is 16 tokens for completions; chat goes on to the context's end, which
    // here would be refused past a long prompt: both default to 16.
    const char* max_name =
        chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    o.tokens = field<int64_t>(body, max_name, 16, "an integer");
    o.temperature = field<float>(body, "temperature", 1.0f, "a number");
    o.top_p = field<float>(body, "top_p", 1.0f, "a number");
    o.top_k = field<int64_t>(body, "top_k", 0, "an integer");
    o.seed = uint64_t(field<int64_t>(body, "seed", 1337, "an integer"));
    for (auto [name, to] : {std::pair{"frequency_penalty", &r.req.frequency_penalty},
                            std::pair{"presence_penalty", &r.req.presence_penalty}}) {
        *to = field<float>(body, name, 0.0f, "a number");
        if (!(*to >= -2 && *to <= 2))
            throw invalid(fmt::format("'{}' must be in [-2, 2], got {}", name, *to), name);
    }
    // Completions: `logprobs` N, the chosen tokens' and the N likeliest at each place (0: the
    // chosen ones only; absent: none). Chat: `logprobs` true, and `top_logprobs` N.
    const int64_t max_top = Request::kMaxTopLogprobs;
    const char* top_name = chat ? "top_logprobs" : "logprobs";
    if (chat) {
        r.logprobs = field<bool>(body, "logprobs", false, "a boolean");
        r.req.top_logprobs = field<int64_t>(body, "top_logprobs", 0, "an integer");
        if (r.req.top_logprobs > 0 && !r.logprobs)
            throw invalid("'top_logprobs' needs 'logprobs' to be true", "top_logprobs");
    } else {
        r.logprobs = body.contains("logprobs") && !body["logprobs"].is_null();
        r.req.top_logprobs = field<int64_t>(body, "logprobs", 0, "an integer");
    }
    if (r.req.top_logprobs < 0 || r.req.top_logprobs > max_top)
        throw invalid(
            fmt::format("'{}' must be in [0, {}], got {}", top_name, max_top, r.req.top_logprobs),
            top_name);
    o.vocab_limit = ctx.tok.vocab_size();
    // vLLM's and llama.cpp's `ignore_eos`: generate max_tokens whatever the model says (as
    // `weft sample --ignore-eos`; load benchmarks send it).
    o.stop_token = field<bool>(body, "ignore_eos", false, "a boolean") ? -1 : ctx.tok.eot();
    r.req.stop = stop_strings(body);
    if (chat) {
        if (!body.contains("messages"))
            throw invalid("'messages' is required", "messages", "missing_field");
        r.req.prompt = ctx.tok.encode(chat_prompt(body["messages"], ctx.chat));
    } else {
        r.req.prompt = prompt_ids(body, ctx);
    }
    if (o.tokens < 1)
        throw invalid(fmt::format("'{}' must be at least 1, got {}", max_name, o.tokens), max_name);
    if (o.temperature < 0)
        throw invalid(fmt::format("'temperature' must be non-negative, got {}", o.temperature),
                      "temperature");
    if (!(o.top_p > 0 && o.top_p <= 1))
        throw invalid(fmt::format("'top_p' must be in (0, 1], got {}", o.top_p), "top_p");
    if (o.top_k < 0)
        throw invalid(fmt::format("'top_k' must be non-negative, got {}", o.top_k), "top_k");
    if (r.req.prompt.empty())
        throw invalid("the prompt is empty (expected at least one token)",
                      chat ? "messages" : "prompt");
    const int64_t ctx_len = ctx.engine.config().n_positions;
    const int64_t positions = int64_t(r.req.prompt.size()) + o.tokens;
    if (positions > ctx_len)
        throw invalid(fmt::format("the prompt's {} tokens and {} {} make {} positions, past the "
                                  "model's context of {}",
                                  r.req.prompt.size(), max_name, o.tokens, positions, ctx_len),
                      max_name, "context_length_exceeded");
    try {  // whatever else the engine could not serve (a request larger than the KV pool)
        ctx.engine.check(r.req);
    } catch (const Error& e) {
        throw invalid(e.what(), "");
    }
    return r;
}

json completion_json(const ApiRequest& r, const Update& all, const std::string& id, int64_t created,
                     const ApiContext& ctx) {
    json choice = {
        {"index", 0}, {"logprobs", logprobs_json(r, all, ctx)}, {"finish_reason", finish(all)}};
    if (r.chat)
        choice["message"] = {{"role", "assistant"}, {"content", all.text}};
    else
        choice["text"] = all.text;
    return {{"id", id},
            {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", ctx.model_id},
            {"choices", json::array({choice})},
            {"usage", usage(all)}};
}

json chunk_json(const ApiRequest& r, const Update& u, const std::string& id, int64_t created,
                const ApiContext& ctx, bool first) {
    json choice = {
        {"index", 0}, {"logprobs", logprobs_json(r, u, ctx)}, {"finish_reason", finish(u)}};
    if (r.chat) {
        json delta = {{"content", u.text}};
        if (first) delta["role"] = "assistant";
        choice["delta"] = delta;
    } else {
        choice["text"] = u.text;
    }
    json j = {{"id", id},
              {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", ctx.model_id},
              {"choices", json::array({choice})}};
    if (u.done()) j["usage"] = usage(u);
    return j;
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace weft::serve
