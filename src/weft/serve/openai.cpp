#include "weft/serve/openai.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <random>

#include "weft/core/error.hpp"
#include "weft/serve/chat_messages.hpp"

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

// One prompt: text, or an array of token ids inside the model's vocabulary.
std::vector<int32_t> one_prompt(const json& p, const ApiContext& ctx) {
    if (p.is_string()) return ctx.tok.encode(p.get<std::string>());
    std::vector<int32_t> ids;
    for (const json& x : p) {
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

// A completion's prompts: one (a string, or an array of token ids), or a batch (an array of
// strings, or of arrays of token ids), each of which gets its own choices.
std::vector<std::vector<int32_t>> prompts(const json& body, const ApiContext& ctx) {
    auto it = body.find("prompt");
    if (it == body.end()) throw invalid("'prompt' is required", "prompt", "missing_field");
    const char* expected = "a string, an array of token ids, or an array of either";
    if (!it->is_string() && !it->is_array())
        throw invalid(fmt::format("'prompt' must be {}, got {}", expected, it->dump()), "prompt",
                      "invalid_type");
    const bool batch = it->is_array() && !it->empty() && !(*it)[0].is_number();
    if (!batch) return {one_prompt(*it, ctx)};
    std::vector<std::vector<int32_t>> out;
    for (const json& p : *it) {
        if (!p.is_string() && !p.is_array())
            throw invalid(
                fmt::format("'prompt' must be {}, got the element {}", expected, p.dump()),
                "prompt", "invalid_type");
        out.push_back(one_prompt(p, ctx));
    }
    return out;
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

// OpenAI's logit_bias: an object from token ids (decimal strings) to biases in [-100, 100], sorted
// by id.
std::vector<std::pair<int32_t, float>> logit_bias(const json& body, const ApiContext& ctx) {
    auto it = body.find("logit_bias");
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_object())
        throw invalid(
            fmt::format("'logit_bias' must be an object from token ids to numbers, got {}",
                        it->dump()),
            "logit_bias", "invalid_type");
    const int64_t V = ctx.tok.vocab_size();
    std::vector<std::pair<int32_t, float>> out;
    for (const auto& [key, value] : it->items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= V)
            throw invalid(fmt::format("'logit_bias' key '{}' is not a token id (expected an "
                                      "integer in [0, {}))",
                                      key, V),
                          "logit_bias");
        if (!value.is_number())
            throw invalid(
                fmt::format("'logit_bias' of {} must be a number, got {}", key, value.dump()),
                "logit_bias", "invalid_type");
        const float bias = value.get<float>();
        if (!(bias >= -100 && bias <= 100))
            throw invalid(
                fmt::format("'logit_bias' of {} must be in [-100, 100], got {}", key, value.dump()),
                "logit_bias");
        out.push_back({int32_t(id), bias});
    }
    std::sort(out.begin(), out.end());
    for (size_t i = 1; i < out.size(); ++i)
        if (out[i].first == out[i - 1].first)
            throw invalid(fmt::format("'logit_bias' names token {} twice", out[i].first),
                          "logit_bias");
    return out;
}

// OpenAI's response_format: {"type": "text"} (the default), {"type": "json_object"} (JSON mode),
// or {"type": "json_schema", "json_schema": {"schema": {...}}} (structured outputs: JSON mode
// whose object is an instance of the schema). `text` is the body as sent: the schema's
// properties are written in its order, which a parse into a sorted object would lose.
void json_mode(const json& body, const std::string& text, Request& q) {
    auto it = body.find("response_format");
    if (it == body.end() || it->is_null()) return;
    auto type = it->is_object() ? it->find("type") : it->end();
    if (!it->is_object() || type == it->end() || !type->is_string())
        throw invalid(
            fmt::format("'response_format' must be an object with a string 'type', got {}",
                        it->dump()),
            "response_format", "invalid_type");
    const std::string t = type->get<std::string>();
    if (t != "text" && t != "json_object" && t != "json_schema")
        throw invalid(fmt::format("'response_format' type '{}' is unknown (expected \"text\", "
                                  "\"json_object\" or \"json_schema\")",
                                  t),
                      "response_format");
    q.json_object = t != "text";
    if (t != "json_schema") return;
    const nlohmann::ordered_json format = nlohmann::ordered_json::parse(text)["response_format"];
    auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object() || !spec->contains("schema"))
        throw invalid(fmt::format("'response_format' of type json_schema needs 'json_schema': "
                                  "{{\"name\": ..., \"schema\": {{...}}}}, got {}",
                                  format.dump()),
                      "response_format");
    try {
        q.json_schema = std::make_shared<const JsonSchema>(spec->at("schema"));
    } catch (const Error& e) {
        throw invalid(fmt::format("'response_format' json_schema: {}", e.what()),
                      "response_format");
    }
}

// Fields of OpenAI's API that this server does not implement, each with its neutral value: a
// client may send that (or null), anything else is refused rather than ignored, since each would
// change what the client gets.
void refuse_unsupported(const json& body, bool chat) {
    struct Unsupported {
        const char* name;
        json neutral;
        const char* why;
        bool chat_only = false, completions_only = false;
    };
    static const Unsupported fields[] = {
        {"best_of", 1, "no choice among more in a chat", true},
        {"echo", false, "no echo of the prompt in a chat", true},
        {"suffix", "", "no suffix"},
        {"tools", json::array(), "tools are a chat's", false, true},
        {"tool_choice", "none", "tools are a chat's", false, true},
        {"functions", json::array(), "the deprecated functions: send 'tools'"},
        {"function_call", "none", "the deprecated functions: send 'tool_choice'"},
    };
    for (const Unsupported& f : fields) {
        if ((f.chat_only && !chat) || (f.completions_only && chat)) continue;
        auto it = body.find(f.name);
        if (it == body.end() || it->is_null() || *it == f.neutral) continue;
        throw ApiError{400,
                       fmt::format("'{}' {} is not supported by this server ({}: expected {} or "
                                   "no '{}')",
                                   f.name, it->dump(), f.why, f.neutral.dump(), f.name),
                       "invalid_request_error", f.name, "unsupported_parameter"};
    }
}

// Prompt tokens once a prompt (not once a choice, as vLLM counts them), generated ones of every
// choice.
json usage(const ApiRequest& r, const std::vector<ChoiceSent>& sent) {
    int64_t prompt = 0, completion = 0;
    for (size_t c = 0; c < sent.size(); ++c) {
        if (r.choices[c].choice == 0) prompt += sent[c].prompt_tokens;
        completion += sent[c].completion_tokens;
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion}};
}

// A token's text as the chat API's `bytes`: its UTF-8 bytes, which may end mid-character.
json token_bytes(const std::string& text) {
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(int(c));
    return bytes;
}

// One token of a choice's logprobs: its log-probability (none for an echoed prompt's first
// token) and alternatives.
struct Scored {
    int32_t id;
    std::optional<float> logprob;
    const std::vector<model::TokenLogprob>* top;
};

// The tokens of `u` whose log-probabilities go out: with `echo`, the prompt's first (once) and
// those the engine scored, then the generated ones.
std::vector<Scored> scored_tokens(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s) {
    static const std::vector<model::TokenLogprob> none;
    auto top = [](const auto& all, size_t i) { return i < all.size() ? &all[i] : &none; };
    const std::vector<int32_t>& prompt = r.choices[c].prompt;
    std::vector<Scored> out;
    if (r.echo && s.echoed == 0) out.push_back({prompt[0], std::nullopt, &none}), s.echoed = 1;
    for (size_t i = 0; i < u.prompt_logprobs.size(); ++i)
        out.push_back(
            {prompt[size_t(s.echoed++)], u.prompt_logprobs[i], top(u.prompt_top_logprobs, i)});
    for (size_t i = 0; i < u.tokens.size(); ++i)
        out.push_back({u.tokens[i], u.logprobs[i], top(u.top_logprobs, i)});
    return out;
}

json logprobs_json(const ApiRequest& r, const std::vector<Scored>& scored, ChoiceSent& s,
                   const ApiContext& ctx) {
    if (!r.logprobs) return nullptr;
    auto value = [](const std::optional<float>& lp) { return lp ? json(*lp) : json(nullptr); };
    if (!r.chat) {
        // The legacy shape: per token an object from token text to log-probability (its keys
        // come out sorted, not by likelihood). Two ids of the same text keep the likelier.
        json tokens = json::array(), lps = json::array(), tops = json::array(), ids = json::array(),
             offsets = json::array();
        for (const Scored& t : scored) {
            const std::string text = ctx.tok.decode_token(t.id);
            tokens.push_back(text);
            offsets.push_back(s.offset);  // bytes of the choice's tokens before this one
            s.offset += int64_t(text.size());
            lps.push_back(value(t.logprob));
            ids.push_back(t.id);
            json alternatives = json::object();
            for (const model::TokenLogprob& a : *t.top) {
                const std::string text = ctx.tok.decode_token(a.id);
                if (!alternatives.contains(text)) alternatives[text] = a.logprob;
            }
            tops.push_back(r.choices[0].top_logprobs > 0 && t.logprob ? alternatives
                                                                      : json(nullptr));
        }
        return {{"tokens", tokens},
                {"token_logprobs", lps},
                {"top_logprobs", tops},
                {"text_offset", offsets},
                {"token_ids", ids}};
    }
    json content = json::array();
    for (const Scored& t : scored) {
        json alternatives = json::array();
        for (const model::TokenLogprob& a : *t.top) {
            const std::string text = ctx.tok.decode_token(a.id);
            alternatives.push_back({{"token", text},
                                    {"logprob", a.logprob},
                                    {"bytes", token_bytes(text)},
                                    {"token_id", a.id}});
        }
        const std::string text = ctx.tok.decode_token(t.id);
        content.push_back({{"token", text},
                           {"logprob", value(t.logprob)},
                           {"bytes", token_bytes(text)},
                           {"token_id", t.id},
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

std::string chat_prompt(const json& messages, const ChatFormat& chat, const json& tools) {
    const json checked = chat_messages(messages);
    try {
        return chat.render(checked, tools);
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
    refuse_unsupported(body, chat);
    const std::string model = field<std::string>(body, "model", ctx.model_id, "a string");
    if (model != ctx.model_id)
        throw ApiError{404,
                       fmt::format("the model '{}' does not exist (this server has '{}')", model,
                                   ctx.model_id),
                       "invalid_request_error", "model", "model_not_found"};
    ApiRequest r;
    r.chat = chat;
    r.stream = field<bool>(body, "stream", false, "a boolean");
    r.echo = !chat && field<bool>(body, "echo", false, "a boolean");
    Request q;  // every choice's, but for its prompt
    model::SampleOptions& o = q.o;
    // OpenAI's default is 16 tokens for completions; chat goes on to the context's end, which
    // here would be refused past a long prompt: both default to 16.
    const char* max_name =
        chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    o.tokens = field<int64_t>(body, max_name, 16, "an integer");
    o.temperature = field<float>(body, "temperature", 1.0f, "a number");
    o.top_p = field<float>(body, "top_p", 1.0f, "a number");
    o.top_k = field<int64_t>(body, "top_k", 0, "an integer");
    o.seed = uint64_t(field<int64_t>(body, "seed", 1337, "an integer"));
    for (auto [name, to] : {std::pair{"frequency_penalty", &q.frequency_penalty},
                            std::pair{"presence_penalty", &q.presence_penalty}}) {
        *to = field<float>(body, name, 0.0f, "a number");
        if (!(*to >= -2 && *to <= 2))
            throw invalid(fmt::format("'{}' must be in [-2, 2], got {}", name, *to), name);
    }
    // vLLM's field (and Hugging Face's generate's): 1 is off.
    q.repetition_penalty = field<float>(body, "repetition_penalty", 1.0f, "a number");
    if (!(q.repetition_penalty > 0 && std::isfinite(q.repetition_penalty)))
        throw invalid(fmt::format("'repetition_penalty' must be a positive number, got {}",
                                  q.repetition_penalty),
                      "repetition_penalty");
    // Completions: `logprobs` N, the chosen tokens' and the N likeliest at each place (0: the
    // chosen ones only; absent: none). Chat: `logprobs` true, and `top_logprobs` N.
    const int64_t max_top = Request::kMaxTopLogprobs;
    const char* top_name = chat ? "top_logprobs" : "logprobs";
    if (chat) {
        r.logprobs = field<bool>(body, "logprobs", false, "a boolean");
        q.top_logprobs = field<int64_t>(body, "top_logprobs", 0, "an integer");
        if (q.top_logprobs > 0 && !r.logprobs)
            throw invalid("'top_logprobs' needs 'logprobs' to be true", "top_logprobs");
    } else {
        r.logprobs = body.contains("logprobs") && !body["logprobs"].is_null();
        q.top_logprobs = field<int64_t>(body, "logprobs", 0, "an integer");
    }
    if (q.top_logprobs < 0 || q.top_logprobs > max_top)
        throw invalid(
            fmt::format("'{}' must be in [0, {}], got {}", top_name, max_top, q.top_logprobs),
            top_name);
    q.prompt_logprobs = r.echo && r.logprobs;
    o.vocab_limit = ctx.tok.vocab_size();
    // vLLM's and llama.cpp's `ignore_eos`: generate max_tokens whatever the model says (as
    // `weft sample --ignore-eos`; load benchmarks send it).
    o.stop_token = field<bool>(body, "ignore_eos", false, "a boolean") ? -1 : ctx.tok.eot();
    q.stop = stop_strings(body);
    q.logit_bias = logit_bias(body, ctx);
    json_mode(body, text, q);
    if (chat) r.tools = parse_tool_choice(body, text, ctx.tool_call_parser);
    if (r.tools.forced()) {
        if (q.json_object)
            throw invalid(fmt::format("'tool_choice' {} forces a call, whose text is its "
                                      "arguments: 'response_format' {} cannot shape it too "
                                      "(expected response_format \"text\", or tool_choice "
                                      "\"none\")",
                                      body["tool_choice"].dump(), body["response_format"].dump()),
                          "tool_choice");
        q.json_object = true;
        q.json_schema = r.tools.schema;
    }
    if (r.tools.kind != ToolChoice::Kind::kNone) {
        std::random_device random;
        r.call_id = fmt::format("{:08x}{:08x}", random(), random());
    }
    if (q.json_object && o.stop_token < 0)
        throw invalid(
            "'ignore_eos' with JSON mode or a forced tool call: nothing may follow the object but "
            "the end of text (expected no ignore_eos)",
            "ignore_eos");
    const int64_t n = field<int64_t>(body, "n", 1, "an integer");
    if (n < 1 || n > ApiRequest::kMaxChoices)
        throw invalid(fmt::format("'n' must be in [1, {}], got {}", ApiRequest::kMaxChoices, n),
                      "n");
    // Completions' best_of (a chat refused it above): this many run, the n likeliest returned.
    const int64_t best_of = chat ? n : field<int64_t>(body, "best_of", n, "an integer");
    if (best_of < n || best_of > ApiRequest::kMaxChoices)
        throw invalid(fmt::format("'best_of' must be in ['n' = {}, {}], got {}", n,
                                  ApiRequest::kMaxChoices, best_of),
                      "best_of");
    if (best_of > n && r.stream)
        throw invalid(fmt::format("'best_of' {} with 'stream': the best {} of them are known only "
                                  "at the end (expected no stream, or best_of = n)",
                                  best_of, n),
                      "best_of");
    r.n = n, r.best_of = best_of;
    // best_of ranks its choices by their tokens' log-probabilities.
    q.logprobs = r.logprobs || best_of > n;
    std::vector<std::vector<int32_t>> texts;
    if (chat) {
        if (!body.contains("messages"))
            throw invalid("'messages' is required", "messages", "missing_field");
        texts.push_back(ctx.tok.encode(chat_prompt(body["messages"], ctx.chat, r.tools.tools)));
    } else {
        texts = prompts(body, ctx);
    }
    if (int64_t(texts.size()) * best_of > ApiRequest::kMaxChoices)
        throw invalid(fmt::format("{} prompts of {} {} make {} choices, more than {}", texts.size(),
                                  best_of > n ? "'best_of'" : "'n'", best_of,
                                  int64_t(texts.size()) * best_of, ApiRequest::kMaxChoices),
                      best_of > n ? "best_of" : "n");
    // 0 tokens: the legacy API's way to score a prompt (echo with logprobs), nothing generated.
    if (o.tokens < (q.prompt_logprobs ? 0 : 1))
        throw invalid(fmt::format("'{}' must be at least 1 (0 only with echo and logprobs), got {}",
                                  max_name, o.tokens),
                      max_name);
    if (o.temperature < 0)
        throw invalid(fmt::format("'temperature' must be non-negative, got {}", o.temperature),
                      "temperature");
    if (!(o.top_p > 0 && o.top_p <= 1))
        throw invalid(fmt::format("'top_p' must be in (0, 1], got {}", o.top_p), "top_p");
    if (o.top_k < 0)
        throw invalid(fmt::format("'top_k' must be non-negative, got {}", o.top_k), "top_k");
    for (std::vector<int32_t>& text : texts) {
        q.prompt = std::move(text);
        if (q.prompt.empty())
            throw invalid("the prompt is empty (expected at least one token)",
                          chat ? "messages" : "prompt");
        const int64_t ctx_len = ctx.engine.config().n_positions;
        const int64_t positions = int64_t(q.prompt.size()) + o.tokens;
        if (positions > ctx_len)
            throw invalid(fmt::format("the prompt's {} tokens and {} {} make {} positions, past "
                                      "the model's context of {}",
                                      q.prompt.size(), max_name, o.tokens, positions, ctx_len),
                          max_name, "context_length_exceeded");
        try {  // whatever else the engine could not serve (a request larger than the KV pool)
            ctx.engine.check(q);
        } catch (const Error& e) {
            throw invalid(e.what(), "");
        }
        for (int64_t j = 0; j < best_of; ++j) {
            r.choices.push_back(q);
            r.choices.back().choice = j;
        }
    }
    return r;
}

namespace {

json choice_json(const ApiRequest& r, size_t c, const Update& u, ChoiceSent& s,
                 const ApiContext& ctx) {
    std::string text = u.text;
    if (r.echo && s.first) text = ctx.tok.decode(r.choices[c].prompt) + text;
    json choice = {{"index", c},
                   {"logprobs", logprobs_json(r, scored_tokens(r, c, u, s), s, ctx)},
                   {"finish_reason", finish(u)}};
    if (r.chat && r.tools.kind != ToolChoice::Kind::kNone) {
        tool_choice_json(r, c, u, s, text, choice);
    } else if (r.stream && r.chat) {
        json delta = {{"content", text}};
        if (s.first) delta["role"] = "assistant";
        choice["delta"] = delta;
    } else if (r.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
        choice["text"] = text;
    }
    s.first = false;
    s.prompt_tokens = u.prompt_tokens;
    s.completion_tokens = u.completion_tokens;
    s.done = s.done || u.done();
    return choice;
}

// The choices an answer returns, in order: all of them; or with best_of, each prompt's n whose
// tokens' log-probabilities sum highest, highest first (ties: the earlier choice).
std::vector<size_t> returned(const ApiRequest& r, const std::vector<Update>& all) {
    std::vector<size_t> out;
    if (r.best_of == r.n) {
        for (size_t c = 0; c < all.size(); ++c) out.push_back(c);
        return out;
    }
    const size_t B = size_t(r.best_of);
    for (size_t p = 0; p < all.size(); p += B) {
        std::vector<std::pair<double, size_t>> ranked;
        for (size_t c = p; c < p + B && c < all.size(); ++c) {
            double sum = 0;
            for (float lp : all[c].logprobs) sum += lp;
            ranked.push_back({-sum, c});
        }
        std::stable_sort(ranked.begin(), ranked.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t k = 0; k < size_t(r.n) && k < ranked.size(); ++k)
            out.push_back(ranked[k].second);
    }
    return out;
}

}  // namespace

json completion_json(const ApiRequest& r, const std::vector<Update>& all, const std::string& id,
                     int64_t created, const ApiContext& ctx) {
    std::vector<ChoiceSent> sent(all.size());
    json choices = json::array();
    for (size_t c : returned(r, all)) {
        choices.push_back(choice_json(r, c, all[c], sent[c], ctx));
        choices.back()["index"] = choices.size() - 1;
    }
    // The usage counts every choice that ran, returned or not (OpenAI's best_of spends them).
    for (size_t c = 0; c < all.size(); ++c) {
        sent[c].prompt_tokens = all[c].prompt_tokens;
        sent[c].completion_tokens = all[c].completion_tokens;
    }
    return {{"id", id},           {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created}, {"model", ctx.model_id},
            {"choices", choices}, {"usage", usage(r, sent)}};
}

json chunk_json(const ApiRequest& r, size_t c, const Update& u, std::vector<ChoiceSent>& sent,
                const std::string& id, int64_t created, const ApiContext& ctx) {
    json j = {{"id", id},
              {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", ctx.model_id},
              {"choices", json::array({choice_json(r, c, u, sent[c], ctx)})}};
    if (all_sent(sent)) j["usage"] = usage(r, sent);
    return j;
}

bool all_sent(const std::vector<ChoiceSent>& sent) {
    return std::all_of(sent.begin(), sent.end(), [](const ChoiceSent& s) { return s.done; });
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace weft::serve
