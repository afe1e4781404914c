#include "weft/model/qwen2_family.hpp"

#include <nlohmann/json.hpp>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/hf_config.hpp"
#include "weft/core/error.hpp"
#include "weft/model/llama_family.hpp"

namespace weft::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig preset(int64_t vocab, int64_t positions, int64_t layers, int64_t heads,
                   int64_t kv_heads, int64_t width, int64_t ffn, bool tied) {
    ModelConfig c;
    c.family = "qwen2";
    c.vocab_size = vocab, c.n_positions = positions, c.n_layer = layers;
    c.n_head = heads, c.n_kv_head = kv_heads, c.n_embd = width, c.n_inner = ffn;
    c.tie_embeddings = tied;
    // Qwen2Config's: RMSNorm epsilon 1e-6, and the rope base every released Qwen2 uses.
    c.ln_eps = 1e-6f, c.rope_theta = 1000000.0;
    c.qkv_bias = true;
    return c;
}

void validate(const ModelConfig& c, const std::string& where) {
    WEFT_CHECK(c.qkv_bias,
               "{}: a qwen2 model has biases on q/k/v (qkv_bias true), got qkv_bias false; a model "
               "without them is the llama family",
               where);
    llama_family().validate(c, where);
}

// Qwen2Config's config.json. transformers' reader for Llama (ckpt/hf_llama_config) refuses
// model_type qwen2, so the keys are read here; what weft's Llama does not compute is refused by
// name, as there.
ModelConfig read_hf(const fs::path& dir) {
    const fs::path file = dir / "config.json";
    const json config = ckpt::read_config_json(file, "a Hugging Face Qwen2 model directory");
    auto value = [&](const char* key) -> const json* {
        auto it = config.find(key);
        return it == config.end() || it->is_null() ? nullptr : &*it;
    };
    WEFT_CHECK(config.value("model_type", json()) == "qwen2",
               "{}: model_type is {}, expected \"qwen2\"", file.string(),
               config.value("model_type", json()).dump());
    // Other heads on the same body (Qwen2ForSequenceClassification, ...) have other tensors.
    if (const json* arch = value("architectures"))
        WEFT_CHECK(*arch == json::array({"Qwen2ForCausalLM"}),
                   "{}: architectures is {}, expected [\"Qwen2ForCausalLM\"]", file.string(),
                   arch->dump());
    const ckpt::HfModelKey keys[] = {
        {"hidden_act", {"silu"}, "weft's MLP is SwiGLU: silu(gate) x up"},
        {"use_sliding_window", {false}, "weft's attention has no sliding window"},
        {"partial_rotary_factor", {1}, "weft rotates every dimension of each head"},
        {"rope_scaling", {}, "weft's Qwen2 has no rope scaling"},
    };
    ckpt::check_model_keys(config, file, keys);
    if (const json* types = value("layer_types"))
        for (const json& t : *types)
            WEFT_CHECK(t == "full_attention",
                       "{}: \"layer_types\" holds {}, expected \"full_attention\" only: weft's "
                       "attention has no sliding window",
                       file.string(), t.dump());

    auto size = [&](const char* key) {
        const json* v = value(key);
        WEFT_CHECK(v && v->is_number_unsigned() && v->get<uint64_t>() > 0 &&
                       v->get<uint64_t>() <= uint64_t(INT64_MAX),
                   "{}: \"{}\" is {}, expected a positive integer", file.string(), key,
                   v ? v->dump() : "absent");
        return v->get<int64_t>();
    };
    auto number = [&](const json* v, const char* key, double fallback) {
        if (!v) return fallback;
        WEFT_CHECK(v->is_number() && v->get<double>() > 0,
                   "{}: \"{}\" is {}, expected a positive number", file.string(), key, v->dump());
        return v->get<double>();
    };
    ModelConfig c = preset(size("vocab_size"), size("max_position_embeddings"),
                           size("num_hidden_layers"), size("num_attention_heads"),
                           value("num_key_value_heads") ? size("num_key_value_heads") : 0,
                           size("hidden_size"), size("intermediate_size"), false);
    if (value("head_dim") && size("head_dim") * c.n_head != c.n_embd)
        c.n_head_dim = size("head_dim");
    c.ln_eps = float(number(value("rms_norm_eps"), "rms_norm_eps", 1e-6));
    // transformers 5 writes rope_parameters (rope_theta, rope_type "default") in place of
    // rope_theta.
    c.rope_theta = number(value("rope_theta"), "rope_theta", 10000.0);
    if (const json* rope = value("rope_parameters")) {
        WEFT_CHECK(rope->is_object() && rope->value("rope_type", "default") == "default",
                   "{}: \"rope_parameters\" is {}, expected rope_type \"default\": weft's Qwen2 "
                   "has no rope scaling",
                   file.string(), rope->dump());
        if (auto it = rope->find("rope_theta"); it != rope->end())
            c.rope_theta = number(&*it, "rope_parameters.rope_theta", c.rope_theta);
    }
    if (const json* tied = value("tie_word_embeddings")) {
        WEFT_CHECK(tied->is_boolean(), "{}: \"tie_word_embeddings\" is {}, expected true or false",
                   file.string(), tied->dump());
        c.tie_embeddings = tied->get<bool>();
    }
    c.validate(file.string());
    return c;
}

void write_hf(const fs::path& dir, const ModelConfig& c) {
    // Keys as Qwen2Config.to_json_string writes them (sorted, as nlohmann::json keeps them);
    // token ids null rather than Qwen's, which belong to its own vocabulary.
    json config = {
        {"architectures", {"Qwen2ForCausalLM"}},
        {"attention_dropout", 0.0},
        {"bos_token_id", nullptr},
        {"eos_token_id", nullptr},
        {"hidden_act", "silu"},
        {"hidden_size", c.n_embd},
        {"initializer_range", 0.02},
        {"intermediate_size", c.ffn()},
        {"max_position_embeddings", c.n_positions},
        {"max_window_layers", c.n_layer},
        {"model_type", "qwen2"},
        {"num_attention_heads", c.n_head},
        {"num_hidden_layers", c.n_layer},
        {"num_key_value_heads", c.kv_heads()},
        {"rms_norm_eps", c.ln_eps_decimal()},
        {"rope_scaling", nullptr},
        {"rope_theta", c.rope_theta},
        {"sliding_window", nullptr},
        {"tie_word_embeddings", c.tie_embeddings},
        {"torch_dtype", "float32"},
        {"use_cache", true},
        {"use_sliding_window", false},
        {"vocab_size", c.vocab_size},
    };
    // Qwen2's attention reads head_dim when the config has one, hidden_size / heads otherwise.
    if (c.head_dim() * c.n_head != c.n_embd) config["head_dim"] = c.head_dim();
    ckpt::write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace

const Family& qwen2_family() {
    // The Llama family's model, tensors (with ModelConfig::qkv_bias), counts and Hugging Face
    // tensor names; Qwen2's presets, checks and config.json.
    static const Family f = [] {
        Family q = llama_family();
        q.name = "qwen2";
        q.hf_model_types = {{"qwen2", "Qwen2ForCausalLM"}};
        q.presets = {
            // Tests: llama-tiny's size with 4 query heads of width 16 sharing 2 key/value heads
            // (the biases need head_dim a multiple of 16), untied.
            {"qwen2-tiny", preset(50257, 256, 2, 4, 2, 64, 192, false)},
            // Qwen/Qwen2-0.5B config.json (tied head).
            {"qwen2-0.5b", preset(151936, 131072, 24, 14, 2, 896, 4864, true)},
        };
        q.validate = validate;
        q.read_hf_config = read_hf;
        q.write_hf_config = write_hf;
        return q;
    }();
    return f;
}

}  // namespace weft::model
