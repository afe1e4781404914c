// A tokenizer.json's vocabulary, merges and pre-tokenizer in the terms of llama.cpp's "gpt2"
// tokenizer, for a GGUF file. The file is first loaded as HfTokenizer (every check of the ids),
// then read again for the spellings, which the loaded tokenizer no longer keeps.
#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer.hpp"
#include "weft/data/io.hpp"

namespace weft::data {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

void flatten(const json& p, std::vector<json>& out) {
    if (p.value("type", "") == "Sequence") {
        for (const json& m : p["pretokenizers"]) flatten(m, out);
    } else {
        out.push_back(p);
    }
}

// The pipelines of the byte-level tokenizers HfTokenizer reads that llama.cpp runs too (its
// llama-vocab.cpp regexes of the same names). HfTokenizer::load has already checked that a
// Split's regex is GPT-2's, Llama 3's or Qwen2's, so one distinctive part tells them apart.
std::string llama_cpp_pre(const json& root, const fs::path& path) {
    std::vector<json> steps;
    flatten(root["pre_tokenizer"], steps);
    auto byte_level = [](const json& s, bool regex) {
        return s.value("type", "") == "ByteLevel" && !s.value("add_prefix_space", true) &&
               s.value("use_regex", true) == regex;
    };
    if (steps.size() == 1 && byte_level(steps[0], true)) return "gpt-2";
    if (steps.size() == 2 && steps[0].value("type", "") == "Digits" &&
        steps[0].value("individual_digits", false) && byte_level(steps[1], true))
        return "smollm";
    if (steps.size() == 2 && steps[0].value("type", "") == "Split" && byte_level(steps[1], false)) {
        const std::string regex = steps[0]["pattern"]["Regex"].get<std::string>();
        if (regex.find(R"(\p{N}{1,3})") != std::string::npos) return "llama-bpe";
        if (regex.find("(?i:") != std::string::npos) return "qwen2";
        return "gpt-2";
    }
    std::string shown = root["pre_tokenizer"].dump();
    if (shown.size() > 160) shown = shown.substr(0, 157) + "...";
    fail(
        "{}: llama.cpp has no pre-tokenizer equal to {} (GGUF export writes GPT-2's, Llama 3's, "
        "Qwen2's and SmolLM's, each without add_prefix_space)",
        path.string(), shown);
}

}  // namespace

HfSpelling read_hf_spelling(const fs::path& path) {
    std::error_code ec;
    const fs::path file = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
    const HfTokenizer tok = HfTokenizer::load(file);
    const json root = parse_json(file, "tokenizer.json");
    HfSpelling s;
    s.pre = llama_cpp_pre(root, file);
    s.eos = tok.eot();
    const auto n = size_t(tok.vocab_size());
    s.tokens.resize(n);
    s.types.assign(n, 5);
    for (const auto& [spelled, id] : root["model"]["vocab"].items()) {
        s.tokens[id.get<size_t>()] = spelled;
        s.types[id.get<size_t>()] = 1;
    }
    for (const json& t : root.value("added_tokens", json::array())) {
        const auto id = t["id"].get<size_t>();
        s.tokens[id] = t["content"].get<std::string>();
        s.types[id] = t.value("special", false) ? 3 : 4;
    }
    for (size_t id = 0; id < n; ++id)
        if (s.types[id] == 5) s.tokens[id] = "[PAD" + std::to_string(id) + "]";
    for (const json& m : root["model"]["merges"])
        s.merges.push_back(m.is_string() ? m.get<std::string>()
                                         : m[0].get<std::string>() + " " + m[1].get<std::string>());
    const fs::path config = file.parent_path() / "tokenizer_config.json";
    if (fs::exists(config, ec)) {
        const std::string bos =
            configured_token(parse_json(config, "tokenizer config"), "bos_token", config);
        if (!bos.empty()) {
            const std::vector<int32_t> ids = tok.encode(bos);
            WEFT_CHECK(ids.size() == 1, "{}: bos_token '{}' is not one token of {}",
                       config.string(), bos, file.string());
            s.bos = ids[0];
        }
    }
    return s;
}

}  // namespace weft::data
