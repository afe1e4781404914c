#include "weft/serve/chat_format.hpp"

#include "weft/data/hf_tokenizer.hpp"
#include "weft/data/io.hpp"

namespace weft::serve {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The family defaults, in the same subset (docs/serving.md). "simple" is weft's own, for models
// that know no chat tokens (GPT-2's tokenizer); the others are the formats of Llama 3 Instruct
// (its template, with its BOS written out) and of Qwen2 and SmolLM Instruct (ChatML).
struct Default {
    const char* name;
    const char* source;
    // The template writes an assistant's tool calls and the tools itself (else ChatFormat
    // writes the calls into the content, and the tools are not shown).
    bool renders_tools = false;
};
constexpr Default kSimple = {
    "simple",
    R"({% for message in messages %}{{ message.role + ': ' + message.content + '\n' }}{% endfor %})"
    R"({% if add_generation_prompt %}assistant:{% endif %})"};
constexpr Default kLlama3 = {
    "Llama 3",
    R"(<|begin_of_text|>{% for message in messages %}{{ '<|start_header_id|>' + message.role + )"
    R"('<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}{% endfor %})"
    R"({% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }})"
    R"({% endif %})"};
// With tools, as Qwen2.5 Instruct's template shows them (a system turn listing them, calls in
// Hermes' <tool_call> blocks, results as <tool_response> in a user turn): the format that
// --tool-call-parser hermes reads back.
constexpr Default kChatML = {
    "ChatML",
    R"({% if tools %}{{ '<|im_start|>system\n' }}{% if messages[0].role == 'system' %})"
    R"({{ messages[0].content + '\n\n' }}{% endif %}{{ '# Tools\n\nYou may call one or more )"
    R"(functions to assist with the user query.\n\nYou are provided with function signatures )"
    R"(within <tools></tools> XML tags:\n<tools>' }}{% for tool in tools %}{{ '\n' + tool | )"
    R"(tojson }}{% endfor %}{{ '\n</tools>\n\nFor each function call, return a json object )"
    R"(with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n)"
    R"({"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }})"
    R"({% endif %}{% for message in messages %}{% if message.role == 'system' and tools and )"
    R"(loop.first %}{% elif message.tool_calls %}{{ '<|im_start|>assistant' }}{% if )"
    R"(message.content %}{{ '\n' + message.content }}{% endif %}{% for call in )"
    R"(message.tool_calls %}{{ '\n<tool_call>\n{"name": "' + call.function.name + )"
    R"('", "arguments": ' + call.function.arguments | tojson + '}\n</tool_call>' }}{% endfor %})"
    R"({{ '<|im_end|>\n' }}{% elif message.role == 'tool' %}{{ '<|im_start|>user\n)"
    R"(<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}{% else %})"
    R"({{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{% endif %})"
    R"({% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})",
    true};

bool has_tokens(const data::Tokenizer& tok, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (tok.encode(n).size() != 1) return false;
    return true;
}

// Llama 3's header tokens where the tokenizer has them (Llama 3), ChatML's where it has those or
// the family is Qwen2's, else the simple template.
const Default& family_default(const std::string& family, const data::Tokenizer& tok) {
    if (family == "gpt2") return kSimple;
    if (family == "llama" &&
        has_tokens(tok, {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}))
        return kLlama3;
    if (family == "qwen2" || has_tokens(tok, {"<|im_start|>", "<|im_end|>"})) return kChatML;
    return kSimple;
}

// The chat_template of a tokenizer_config.json: a string, or a list of {"name", "template"} of
// which the one named "default" is the chat template (transformers' convention).
std::string template_text(const json& t, const fs::path& config) {
    if (t.is_string()) return t.get<std::string>();
    WEFT_CHECK(t.is_array(),
               "{}: chat_template is {}, expected a string or a list of named templates",
               config.string(), t.type_name());
    for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
            return e["template"].get<std::string>();
    return "";
}

}  // namespace

std::string ChatFormat::render(const json& messages, const json& tools) const {
    if (!calls_as_content) return tmpl.render({messages, true, bos_token, eos_token, tools});
    json shown = messages;
    for (json& m : shown) {
        if (!m.contains("tool_calls")) continue;
        std::string text = m.value("content", "");
        for (const json& c : m["tool_calls"]) {
            if (!text.empty()) text += '\n';
            text += nlohmann::ordered_json{{"name", c["function"]["name"]},
                                           {"arguments", c["function"]["arguments"]}}
                        .dump();
        }
        m["content"] = text;
    }
    return tmpl.render({shown, true, bos_token, eos_token, tools});
}

ChatFormat choose_chat_format(const fs::path& tokenizer, const std::string& family,
                              const data::Tokenizer& tok) {
    const Default& fallback = family_default(family, tok);
    auto family_format = [&](const std::string& why, std::string warning = "") {
        return ChatFormat{ChatTemplate::parse(fallback.source),
                          "",
                          "",
                          fmt::format("family default, {} ({})", fallback.name, why),
                          std::move(warning),
                          !fallback.renders_tools};
    };
    if (tokenizer.empty()) return family_format("GPT-2's tokenizer files have no chat template");
    std::error_code ec;
    const fs::path dir = fs::is_directory(tokenizer, ec) ? tokenizer : tokenizer.parent_path();
    const fs::path config = dir / "tokenizer_config.json", jinja = dir / "chat_template.jinja";
    const json c = fs::exists(config, ec) ? data::parse_json(config, "tokenizer config") : json();
    // transformers writes the template into tokenizer_config.json, or (since 4.43's
    // save_pretrained) into chat_template.jinja beside it.
    fs::path source = config;
    std::string text = c.is_object() && c.contains("chat_template")
                           ? template_text(c["chat_template"], config)
                           : "";
    if (text.empty() && fs::exists(jinja, ec)) {
        source = jinja;
        text = data::read_whole_file(jinja, "chat template");
    }
    if (text.empty())
        return family_format(fmt::format("no chat_template in {} and no {}",
                                         c.is_null() ? "a tokenizer_config.json" : config.string(),
                                         jinja.string()));
    std::string bos = data::configured_token(c, "bos_token", config);
    std::string eos = data::configured_token(c, "eos_token", config);
    std::string problem;
    try {
        ChatFormat f{ChatTemplate::parse(text), std::move(bos), std::move(eos),
                     fmt::format("model's, {}", source.string()), ""};
        // A template that cannot render one user turn would fail every request: set aside now.
        f.render(json::array({{{"role", "user"}, {"content", "Hello"}}}));
        return f;
    } catch (const TemplateRaised& e) {
        problem = fmt::format("it refuses a conversation of one user turn: {}", e.what());
    } catch (const Error& e) {
        problem = fmt::format("it is outside weft's Jinja subset: {}", e.what());
    }
    return family_format("weft cannot render the model's",
                         fmt::format("{}: weft cannot render the chat_template ({}); rendering the "
                                     "family default, {}, instead",
                                     source.string(), problem, fallback.name));
}

}  // namespace weft::serve
