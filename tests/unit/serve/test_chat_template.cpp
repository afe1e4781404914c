// The Jinja subset of chat templates against the real templates of the families weft serves,
// with the expected text derived by hand from each template, and the constructs outside the
// subset refused at parse time.
#include <gtest/gtest.h>

#include <fstream>

#include "weft/data/hf_tokenizer.hpp"
#include "weft/serve/chat_format.hpp"
#include "weft/serve/chat_messages.hpp"
#include "weft/serve/chat_template.hpp"
#include "weft/serve/openai.hpp"

namespace weft::serve {
namespace {

using nlohmann::json;

// The templates as the JSON-decoded `chat_template` strings hold them: "\n" inside a Jinja string
// literal is a backslash and an n, hence raw strings.

// Qwen/Qwen2-0.5B-Instruct's tokenizer_config.json (the same in Qwen2-1.5B/7B-Instruct).
constexpr const char* kQwen2 =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
// HuggingFaceTB/SmolLM-135M-Instruct's tokenizer_config.json: plain ChatML.
constexpr const char* kSmolLM =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
// HuggingFaceTB/SmolLM2-135M-Instruct's tokenizer_config.json: ChatML with a default system turn.
constexpr const char* kSmolLM2 =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
// meta-llama/Meta-Llama-3-8B-Instruct's tokenizer_config.json.
constexpr const char* kLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";
// mistralai/Mixtral-8x7B-Instruct-v0.1's (and Mistral-7B-Instruct-v0.1's) tokenizer_config.json.
constexpr const char* kMixtral =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})";

json chat(bool system) {
    json m = json::array();
    if (system) m.push_back({{"role", "system"}, {"content", "You are terse."}});
    m.push_back({{"role", "user"}, {"content", " Hi \n"}});
    m.push_back({{"role", "assistant"}, {"content", "Hello."}});
    m.push_back({{"role", "user"}, {"content", "Count to 3."}});
    return m;
}

std::string render(const char* source, const json& messages, bool add = true, std::string bos = "",
                   std::string eos = "", json tools = nullptr) {
    return ChatTemplate::parse(source).render(
        {messages, add, std::move(bos), std::move(eos), std::move(tools)});
}

TEST(ChatTemplate, Qwen2AddsItsSystemTurnWhenTheChatHasNone) {
    EXPECT_EQ(render(kQwen2, chat(false)),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\n Hi \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nCount to 3.<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(render(kQwen2, chat(true), false),
              "<|im_start|>system\nYou are terse.<|im_end|>\n"
              "<|im_start|>user\n Hi \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nCount to 3.<|im_end|>\n");
}

TEST(ChatTemplate, SmolLMIsChatML) {
    EXPECT_EQ(render(kSmolLM, chat(true)),
              "<|im_start|>system\nYou are terse.<|im_end|>\n"
              "<|im_start|>user\n Hi \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nCount to 3.<|im_end|>\n"
              "<|im_start|>assistant\n");
    const json one = json::array({{{"role", "user"}, {"content", "Hi"}}});
    EXPECT_EQ(render(kSmolLM2, one),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
              "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3TrimsContentAndStartsWithBos) {
    EXPECT_EQ(render(kLlama3, chat(true), true, "<|begin_of_text|>"),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
              "terse.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nCount to 3.<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MixtralAlternatesRolesOrRaises) {
    EXPECT_EQ(render(kMixtral, chat(false), true, "<s>", "</s>"),
              "<s>[INST]  Hi \n [/INST]Hello.</s>[INST] Count to 3. [/INST]");
    try {
        render(kMixtral, chat(true), true, "<s>", "</s>");
        FAIL() << "a system turn was rendered";
    } catch (const TemplateRaised& e) {
        EXPECT_STREQ(e.what(),
                     "Conversation roles must alternate user/assistant/user/assistant/...");
    }
}

// transformers renders with trim_blocks and lstrip_blocks: a block tag's line indentation and
// the newline after it vanish; "-" strips every blank on its side.
TEST(ChatTemplate, WhitespaceControlAsHuggingFaceRenders) {
    const char* t =
        "{% for m in messages %}\n"
        "    {% if m.role == 'user' %}\n"
        "U: {{ m.content }}\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "  {{- '[' -}}  \n  {{ add_generation_prompt }} {# a comment #}\n"
        "  {%- if true -%}  ]  {%- endif %}";
    EXPECT_EQ(render(t, chat(false)), "U:  Hi \n\nU: Count to 3.\n[True ]");
}

TEST(ChatTemplate, PythonSemanticsOfTheSubset) {
    const char* t =
        "{% set rest = messages[1:] %}{{ rest | length }}|{{ messages[-1].content }}|"
        "{{ messages[0]['content'].strip() ~ 1 }}|{{ 'user' in messages[0].role }}|"
        "{{ messages[0].tool_calls is defined }}|{{ not messages[9] is defined }}|"
        "{{ messages[0].name or 'anon' }}|{{ 7 // 2 }},{{ -7 % 3 }},{{ 7 / 2 }}|"
        "{{ 'x' if messages | length > 2 else 'y' }}|{{ {'a': [1, 'b', none]} | tojson }}|"
        "{{ messages[0].content[1:3] }}|{{ 'a,b'.split(',') | join('+') }}|"
        "{% for m in messages %}{{ loop.index }}{{ '.' if not loop.last }}{% endfor %}|"
        "{{ 'Hi'.startswith('H') and 'x'.upper() }}|{{ [1, 2] }}|{{ missing }}|"
        "{{ (messages | first).role | upper }}|{{ 'abc'[::-1] }}{{ messages[-2:] | length }}";
    EXPECT_EQ(render(t, chat(false)),
              "2|Count to 3.|Hi1|True|False|True|anon|3,2,3.5|x|{\"a\": [1, \"b\", null]}|Hi|"
              "a+b|1.2.3|X|[1, 2]||USER|cba2");
}

TEST(ChatTemplate, RuntimeErrorsNameTheOperationAndLine) {
    try {
        render("{{ 'a' }}\n{{ 'n' + messages | length }}", chat(false));
        FAIL() << "a string plus a number was rendered";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "chat template line 2: cannot apply '+' to a string (n) and a number (3)");
    }
}

// Each construct outside the subset is refused at parse time, named with its line.
TEST(ChatTemplate, OutsideTheSubsetIsRefusedAtParse) {
    const std::pair<const char*, const char*> cases[] = {
        {"{% macro f() %}x{% endmacro %}", "line 1: the statement '{% macro %}' is not in"},
        {"a\n{{ x | wordcount }}", "line 2: the filter 'wordcount' is not in"},
        {"{% set ns = namespace(a=1) %}", "line 1: the function 'namespace()' is not in"},
        {"{% set ns.a = 1 %}", "'{% set ns.attribute %}' is not in"},
        {"{{ x.format(1) }}", "the method '.format()' is not in"},
        {"{% if x is divisibleby(3) %}{% endif %}", "the test 'is divisibleby' is not in"},
        {"{% for k, v in x %}{% endfor %}", "a for loop over several names"},
        {"{% if x %}", "the template ends inside a block (expected '{% endif %}')"},
        {"{% endfor %}", "'{% endfor %}' without its opening tag"},
        {"{{ 'open }}", "a string is never closed"},
        {"{{ x ", "'{{' is never closed"},
        {"{{ 2 ** 3 }}", "the operator '**' is not in"},
        {"{% for m in messages %}{% break %}{% endfor %}", "the statement '{% break %}'"},
    };
    for (const auto& [source, want] : cases) {
        try {
            ChatTemplate::parse(source);
            ADD_FAILURE() << "parsed: " << source;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
                << source << " -> " << e.what();
        }
    }
}

namespace fs = std::filesystem;
const fs::path kTokenizers = fs::path(WEFT_SOURCE_DIR) / "tests/data/tokenizers";

// A copy of a test tokenizer in a fresh directory, with `added` special tokens appended and
// `config` as its tokenizer_config.json (null: none).
fs::path tokenizer_dir(const std::string& name, const std::vector<std::string>& added,
                       const json& config) {
    const fs::path dir =
        fs::path(testing::TempDir()) / ("chat_format_" + name + "_" + std::to_string(added.size()) +
                                        (config.is_null() ? "" : "_config"));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ifstream in(kTokenizers / name / "tokenizer.json");
    json t = json::parse(in);
    int id = 0;
    for (const json& a : t["added_tokens"]) id = std::max(id, a["id"].get<int>() + 1);
    for (const std::string& content : added)
        t["added_tokens"].push_back({{"id", id++}, {"content", content}, {"special", true}});
    std::ofstream(dir / "tokenizer.json") << t.dump();
    if (!config.is_null()) std::ofstream(dir / "tokenizer_config.json") << config.dump();
    return dir;
}

std::string chosen(const fs::path& dir, const std::string& family, std::string* description) {
    const data::HfTokenizer tok = data::HfTokenizer::load(dir / "tokenizer.json");
    const ChatFormat f = choose_chat_format(dir, family, tok);
    *description = f.description;
    return f.render(chat(true));
}

// The family defaults by the tokenizer's special tokens, each the text of the real template it
// stands for (the Llama 3 default renders as Llama 3 Instruct's own with its BOS).
TEST(ChatFormat, FamilyDefaultsFollowTheTokenizer) {
    std::string d;
    const fs::path l3 =
        tokenizer_dir("llama3", {"<|start_header_id|>", "<|end_header_id|>"}, nullptr);
    EXPECT_EQ(chosen(l3, "llama", &d), render(kLlama3, chat(true), true, "<|begin_of_text|>"));
    EXPECT_EQ(d, "family default, Llama 3 (no chat_template in a tokenizer_config.json and no " +
                     (l3 / "chat_template.jinja").string() + ")");
    EXPECT_EQ(chosen(l3, "gpt2", &d),
              "system: You are terse.\nuser:  Hi \n\nassistant: Hello.\nuser: Count to "
              "3.\nassistant:");
    EXPECT_EQ(d.substr(0, 23), "family default, simple ");

    const fs::path q = tokenizer_dir("qwen2", {}, json{{"eos_token", "<|im_end|>"}});
    EXPECT_EQ(chosen(q, "qwen2", &d), render(kSmolLM, chat(true)));
    EXPECT_EQ(d, "family default, ChatML (no chat_template in " +
                     (q / "tokenizer_config.json").string() + " and no " +
                     (q / "chat_template.jinja").string() + ")");
    // transformers' newer layout: the template in chat_template.jinja.
    std::ofstream(q / "chat_template.jinja") << kQwen2;
    EXPECT_EQ(chosen(q, "qwen2", &d), render(kQwen2, chat(true)));
    EXPECT_EQ(d, "model's, " + (q / "chat_template.jinja").string());
    fs::remove(q / "chat_template.jinja");
    EXPECT_EQ(chosen(q, "llama", &d), render(kSmolLM, chat(true)));  // SmolLM: ChatML tokens
    EXPECT_EQ(chosen(kTokenizers / "gpt2", "llama", &d).substr(0, 8), "system: ");

    // The model's own, with its bos_token, when it is in the subset.
    const fs::path m = tokenizer_dir(
        "qwen2", {}, json{{"chat_template", kMixtral}, {"bos_token", "<|endoftext|>"}});
    const data::HfTokenizer tok = data::HfTokenizer::load(m / "tokenizer.json");
    const ChatFormat f = choose_chat_format(m, "qwen2", tok);
    EXPECT_EQ(f.description, "model's, " + (m / "tokenizer_config.json").string());
    EXPECT_TRUE(f.warning.empty());
    EXPECT_EQ(f.render(chat(false)),
              "<|endoftext|>[INST]  Hi \n [/INST]Hello.[INST] Count to 3. [/INST]");
}

// A conversation with a tool call and its result, as chat_messages gives it to a template: the
// model's template reads the tools and the call's arguments as values; a family default writes
// the call into the assistant's content.
TEST(ChatTemplate, ToolCallsAndTheirResults) {
    const json sent = json::parse(R"([
      {"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Rome?"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "21 C"}])");
    const json tools = json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
    const json m = chat_messages(sent);
    const char* own =
        "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.role "
        "}}:{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.city }}{% else %}{{ "
        "m.content }}{% endif %};{% endfor %}";
    EXPECT_EQ(render(own, m, true, "", "", tools),
              "[get_weather]user:Weather\nin Rome?;assistant:Rome;tool:21 C;");
    const ChatFormat simple{
        ChatTemplate::parse("{% for m in messages %}{{ m.role + ': ' + m.content + '\n' }}"
                            "{% endfor %}"),
        "",
        "",
        "family default",
        "",
        true};
    EXPECT_EQ(simple.render(m, tools),
              "user: Weather\nin Rome?\nassistant: {\"name\":\"get_weather\",\"arguments\":"
              "{\"city\":\"Rome\"}}\ntool: 21 C\n");
    EXPECT_THROW(chat_messages(json::parse(R"([{"role": "assistant", "content": null}])")),
                 ApiError);

    // The ChatML default shows the tools and the calls as Qwen2.5's template does, in the format
    // --tool-call-parser hermes reads; without tools it is plain ChatML (SmolLMIsChatML).
    const fs::path q = tokenizer_dir("qwen2", {}, json{{"eos_token", "<|im_end|>"}});
    const data::HfTokenizer tok = data::HfTokenizer::load(q / "tokenizer.json");
    const ChatFormat chatml = choose_chat_format(q, "qwen2", tok);
    EXPECT_FALSE(chatml.calls_as_content);
    json with_system = m;
    with_system.insert(with_system.begin(), json{{"role", "system"}, {"content", "Be brief."}});
    EXPECT_EQ(
        chatml.render(with_system, tools),
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to "
        "assist with the user query.\n\nYou are provided with function signatures within "
        "<tools></tools> XML tags:\n<tools>\n{\"function\": {\"name\": \"get_weather\", "
        "\"parameters\": {}}, \"type\": \"function\"}\n</tools>\n\nFor each function call, "
        "return a json object with function name and arguments within <tool_call></tool_call> "
        "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather\nin Rome?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Rome\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n");
    EXPECT_EQ(chatml.render(chat(true)), render(kSmolLM, chat(true)));
}

}  // namespace
}  // namespace weft::serve
