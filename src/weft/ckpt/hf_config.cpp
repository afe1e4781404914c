#include "weft/ckpt/hf_config.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t positive_int(const json& config, const char* key, const fs::path& file) {
    auto it = config.find(key);
    WEFT_CHECK(it != config.end(), "{} has no \"{}\" (expected a positive integer)", file.string(),
               key);
    // 768.0 would parse as a float; a size that is not written as an integer is not trusted.
    WEFT_CHECK(it->is_number_integer(), "{}: \"{}\" is {}, expected a positive integer",
               file.string(), key, it->dump());
    WEFT_CHECK(it->is_number_unsigned() && it->get<uint64_t>() > 0 &&
                   it->get<uint64_t>() <= uint64_t(INT64_MAX),
               "{}: \"{}\" is {}, expected a positive integer", file.string(), key, it->dump());
    return it->get<int64_t>();
}

}  // namespace

json read_config_json(const fs::path& file, std::string_view expected) {
    std::ifstream in(file, std::ios::binary);
    WEFT_CHECK(in && !fs::is_directory(file), "cannot read {} (expected {} with config.json)",
               file.string(), expected);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json config;
    try {
        config = json::parse(text);
    } catch (const json::exception& e) {
        fail("{} is not valid JSON: {}", file.string(), e.what());
    }
    WEFT_CHECK(config.is_object(), "{} must hold a JSON object, got {}", file.string(),
               config.type_name());
    return config;
}

void check_model_keys(const json& config, const fs::path& file, std::span<const HfModelKey> keys) {
    for (const HfModelKey& k : keys) {
        auto it = config.find(k.key);
        if (it == config.end() || it->is_null()) continue;
        // json's == compares numbers by value: 3072 written as 3072.0 is still 3072.
        if (std::find(k.supported.begin(), k.supported.end(), *it) != k.supported.end()) continue;
        std::vector<std::string> values;
        for (const json& v : k.supported) values.push_back(v.dump());
        fail(
            "{}: \"{}\" is {}, expected {} ({}): weft would run another model than "
            "transformers builds from this file",
            file.string(), k.key, it->dump(),
            values.empty() ? "null" : fmt::format("{}", fmt::join(values, " or ")), k.why);
    }
}

HfGpt2Config read_hf_config(const fs::path& model_dir) {
    const fs::path file = model_dir / "config.json";
    const json config = read_config_json(file, "a Hugging Face GPT-2 model directory");

    if (auto it = config.find("model_type"); it != config.end())
        WEFT_CHECK(*it == "gpt2", "{}: model_type is {}, expected \"gpt2\"", file.string(),
                   it->dump());

    HfGpt2Config c;
    c.n_embd = positive_int(config, "n_embd", file);
    c.n_layer = positive_int(config, "n_layer", file);
    c.n_head = positive_int(config, "n_head", file);
    c.n_positions = positive_int(config, "n_positions", file);
    c.vocab_size = positive_int(config, "vocab_size", file);
    WEFT_CHECK(c.n_embd % c.n_head == 0, "{}: n_embd {} is not divisible by n_head {}",
               file.string(), c.n_embd, c.n_head);
    const HfModelKey keys[] = {
        {"activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "weft implements the tanh GELU"},
        {"n_inner", {4 * c.n_embd}, "weft's GPT-2 MLP is 4 x n_embd wide"},
        {"scale_attn_weights", {true}, "weft scales attention scores by 1/sqrt(head_dim)"},
        {"scale_attn_by_inverse_layer_idx",
         {false},
         "weft does not scale attention scores by 1/(layer index + 1)"},
        {"tie_word_embeddings", {true}, "weft's GPT-2 output head is its token embedding wte"},
        {"add_cross_attention", {false}, "weft's GPT-2 has no cross-attention"},
    };
    check_model_keys(config, file, keys);
    if (auto it = config.find("layer_norm_epsilon"); it != config.end()) {
        WEFT_CHECK(it->is_number() && it->get<double>() > 0,
                   "{}: layer_norm_epsilon is {}, expected a positive number", file.string(),
                   it->dump());
        c.layer_norm_epsilon = it->get<double>();
    }
    return c;
}

void write_hf_config(const fs::path& model_dir, const HfGpt2Config& c) {
    WEFT_CHECK(
        c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_positions > 0 && c.vocab_size > 0,
        "cannot write {}: sizes must be positive, got n_embd {} n_layer {} n_head {} "
        "n_positions {} vocab_size {}",
        (model_dir / "config.json").string(), c.n_embd, c.n_layer, c.n_head, c.n_positions,
        c.vocab_size);
    // GPT-2's <|endoftext|> is 50256; a smaller test vocabulary uses its last token instead, so
    // that the ids stay inside the embedding table.
    const int64_t eot = c.vocab_size > 50256 ? 50256 : c.vocab_size - 1;
    // Keys as transformers' GPT2Config.to_json_string writes them (sorted), dropout off because
    // weft trains without it.
    json config = {
        {"activation_function", "gelu_new"},
        {"architectures", {"GPT2LMHeadModel"}},
        {"attn_pdrop", 0.0},
        {"bos_token_id", eot},
        {"embd_pdrop", 0.0},
        {"eos_token_id", eot},
        {"initializer_range", 0.02},
        {"layer_norm_epsilon", c.layer_norm_epsilon},
        {"model_type", "gpt2"},
        {"n_ctx", c.n_positions},
        {"n_embd", c.n_embd},
        {"n_head", c.n_head},
        {"n_inner", nullptr},
        {"n_layer", c.n_layer},
        {"n_positions", c.n_positions},
        {"reorder_and_upcast_attn", false},
        {"resid_pdrop", 0.0},
        {"scale_attn_by_inverse_layer_idx", false},
        {"scale_attn_weights", true},
        {"summary_activation", nullptr},
        {"summary_first_dropout", 0.1},
        {"summary_proj_to_labels", true},
        {"summary_type", "cls_index"},
        {"summary_use_proj", true},
        {"tie_word_embeddings", true},
        {"torch_dtype", "float32"},
        {"use_cache", true},
        {"vocab_size", c.vocab_size},
    };
    write_file_atomic(model_dir / "config.json", config.dump(2) + "\n");
}

}  // namespace weft::ckpt
