#pragma once
// A model's chat template: the Jinja text of a Hugging Face tokenizer_config.json's
// `chat_template`, rendered as transformers' apply_chat_template renders it (trim_blocks and
// lstrip_blocks on), for the subset of Jinja that real templates use (docs/serving.md):
//
//   {{ expr }}, {% if %}/{% elif %}/{% else %}/{% endif %}, {% for x in list %} with loop.index,
//   index0, first, last, length, revindex, revindex0; {% set x = expr %}; {# comments #};
//   whitespace control {%- -%} {{- -}}; literals (strings, numbers, true/false/none, lists,
//   dicts), x.attr, x['key'], x[i], x[a:b:c]; + - * / // % ~, == != < > <= >=, in, not in, and,
//   or, not, a if c else b; filters trim, length, count, tojson, upper, lower, string, first,
//   last, join, default, replace, capitalize; tests defined, undefined, none, string, number,
//   integer, boolean, mapping, sequence, iterable, true, false, even, odd; methods strip,
//   lstrip, rstrip, startswith, endswith, upper, lower, split, replace, title, items, keys,
//   values, get; the function raise_exception(message).
//
// Anything else (macros, namespace(), {% set ns.x %}, loop controls, tuples...) is refused when
// the template is parsed, naming the construct and its line: the server decides at start whether
// it renders the model's template, not per request.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::serve {

// The template called raise_exception(message): the conversation is one the template refuses
// (a 400 with its message).
class TemplateRaised : public Error {
  public:
    using Error::Error;
};

class ChatTemplate {
  public:
    // Parses `source`; a construct outside the subset or a syntax error is an Error naming it.
    static ChatTemplate parse(std::string_view source);

    struct Variables {
        nlohmann::json messages;  // an array of objects
        bool add_generation_prompt = true;
        std::string bos_token, eos_token;
        // A chat request's functions as sent ({"type": "function", "function": {...}}), or
        // null, as transformers passes them.
        nlohmann::json tools;
    };
    // The rendered text. raise_exception throws TemplateRaised; an operation on values it does
    // not apply to (adding a number to a string...) throws Error naming it and the line.
    std::string render(const Variables& v) const;

    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;

  private:
    struct Impl;
    explicit ChatTemplate(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace weft::serve
