#pragma once
// Which chat template a server renders, decided once at start (docs/serving.md): the model's own
// `chat_template` from the tokenizer_config.json (or chat_template.jinja) beside its tokenizer.json
// when weft's Jinja subset renders it, else the family's default, with the reason for the start
// line.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "weft/data/tokenizer.hpp"
#include "weft/serve/chat_template.hpp"

namespace weft::serve {

struct ChatFormat {
    ChatTemplate tmpl;
    std::string bos_token, eos_token;
    // For the start line: "model's (<file>)" or "family default <name> (<why>)".
    std::string description;
    // Why the model's template was set aside although it has one (outside the subset, or it
    // failed on a plain conversation): a warning line; empty otherwise.
    std::string warning;

    // A family default that shows no tool calls (weft's simple one, Llama 3's): an assistant's
    // calls are written into its content, one JSON object of name and arguments per line.
    bool calls_as_content = false;

    // The prompt of `messages` (as chat_messages.hpp gives them) and `tools` (null: none), with
    // the generation prompt. TemplateRaised when the template refuses the conversation.
    std::string render(const nlohmann::json& messages, const nlohmann::json& tools = nullptr) const;
};

// `tokenizer` is what --tokenizer named (a tokenizer.json or its directory; empty: GPT-2's
// files, which have no chat template); `family` the model's; `tok` tells which special tokens
// the family default can use. A tokenizer_config.json that is not JSON, or whose chat_template is
// neither a string nor a list of named templates, is an error.
ChatFormat choose_chat_format(const std::filesystem::path& tokenizer, const std::string& family,
                              const data::Tokenizer& tok);

}  // namespace weft::serve
