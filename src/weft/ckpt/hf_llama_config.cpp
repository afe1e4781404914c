#include "weft/ckpt/hf_llama_config.hpp"

#include <nlohmann/json.hpp>
#include <string_view>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/hf_config.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// nullptr when the key is absent or null: transformers treats both as "use the default".
const json* value_of(const json& obj, std::string_view key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// `where` prefixes the key in messages ("rope_scaling.factor").
std::string key_name(std::string_view where, std::string_view key) {
    return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}

int64_t positive_int(const json& obj, std::string_view key, const fs::path& file,
                     std::string_view where = "") {
    const json* v = value_of(obj, key);
    WEFT_CHECK(v, "{} has no \"{}\" (expected a positive integer)", file.string(),
               key_name(where, key));
    // 576.0 would parse as a float; a size that is not written as an integer is not trusted.
    WEFT_CHECK(v->is_number_unsigned() && v->get<uint64_t>() > 0 &&
                   v->get<uint64_t>() <= uint64_t(INT64_MAX),
               "{}: \"{}\" is {}, expected a positive integer", file.string(), key_name(where, key),
               v->dump());
    return v->get<int64_t>();
}

// Hub files write some floats as integers ("rope_theta": 500000, "factor": 8), so any number is
// accepted.
double positive_number(const json& v, std::string_view key, const fs::path& file,
                       std::string_view where = "") {
    WEFT_CHECK(v.is_number() && v.get<double>() > 0, "{}: \"{}\" is {}, expected a positive number",
               file.string(), key_name(where, key), v.dump());
    return v.get<double>();
}

double number_or(const json& obj, std::string_view key, double fallback, const fs::path& file) {
    const json* v = value_of(obj, key);
    return v ? positive_number(*v, key, file) : fallback;
}

int64_t token_id(const json& v, std::string_view key, const fs::path& file) {
    WEFT_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX),
               "{}: \"{}\" holds {}, expected a non-negative integer token id", file.string(), key,
               v.dump());
    return v.get<int64_t>();
}

// rope_scaling (transformers 4.x) or rope_parameters (5.x, which also holds rope_theta). Which
// one wins, and where rope_theta comes from, follows transformers 5's conversion of old files.
void read_rope(const json& config, const fs::path& file, HfLlamaConfig& c) {
    const json* scaling = value_of(config, "rope_scaling");
    const char* where = scaling ? "rope_scaling" : "rope_parameters";
    const json* rope = scaling ? scaling : value_of(config, "rope_parameters");
    c.rope_theta = number_or(config, "rope_theta", c.rope_theta, file);
    if (!rope) return;
    WEFT_CHECK(rope->is_object(), "{}: \"{}\" is {}, expected an object or null", file.string(),
               where, rope->dump());
    if (const json* theta = value_of(*rope, "rope_theta"))
        c.rope_theta = positive_number(*theta, "rope_theta", file, where);

    const json* type = value_of(*rope, "rope_type");
    if (!type) type = value_of(*rope, "type");  // the key of files older than transformers 4.43
    if (!type) {
        // Only a rope_parameters holding nothing but rope_theta means "no scaling" by omission;
        // a factor without a type cannot be interpreted.
        WEFT_CHECK(rope->size() == (rope->contains("rope_theta") ? 1u : 0u),
                   "{}: \"{}\" has no \"rope_type\" (expected \"linear\" or \"llama3\", or "
                   "\"default\" for none)",
                   file.string(), where);
        return;
    }
    WEFT_CHECK(type->is_string(), "{}: {}.rope_type is {}, expected a string", file.string(), where,
               type->dump());
    const std::string t = type->get<std::string>();
    if (t == "default") return;
    WEFT_CHECK(t == "linear" || t == "llama3",
               "{}: {} type \"{}\" is not supported (weft implements \"linear\" and \"llama3\"; "
               "\"default\" means none)",
               file.string(), where, t);

    c.rope_scaling.type = t;
    auto required = [&](std::string_view key) -> const json& {
        const json* v = value_of(*rope, key);
        WEFT_CHECK(v, "{}: {} of type \"{}\" has no \"{}\" ({} needs {})", file.string(), where, t,
                   key, t,
                   t == "linear" ? "factor"
                                 : "factor, low_freq_factor, high_freq_factor and "
                                   "original_max_position_embeddings");
        return *v;
    };
    c.rope_scaling.factor = positive_number(required("factor"), "factor", file, where);
    if (t == "linear") return;
    c.rope_scaling.low_freq_factor =
        positive_number(required("low_freq_factor"), "low_freq_factor", file, where);
    c.rope_scaling.high_freq_factor =
        positive_number(required("high_freq_factor"), "high_freq_factor", file, where);
    required("original_max_position_embeddings");
    c.rope_scaling.original_max_position_embeddings =
        positive_int(*rope, "original_max_position_embeddings", file, where);
    // llama3 interpolates over wavelengths between the two factors; it divides by their gap.
    WEFT_CHECK(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor,
               "{}: {}.high_freq_factor {} must be greater than low_freq_factor {}", file.string(),
               where, c.rope_scaling.high_freq_factor, c.rope_scaling.low_freq_factor);
}

}  // namespace

HfModelId read_hf_model_id(const fs::path& model_dir) {
    const fs::path file = model_dir / "config.json";
    const json config = read_config_json(file, "a Hugging Face model directory");
    HfModelId id;
    if (const json* type = value_of(config, "model_type")) {
        WEFT_CHECK(type->is_string(), "{}: model_type is {}, expected a string", file.string(),
                   type->dump());
        id.model_type = type->get<std::string>();
    }
    if (const json* arch = value_of(config, "architectures");
        arch && arch->is_array() && arch->size() == 1 && (*arch)[0].is_string())
        id.architecture = (*arch)[0].get<std::string>();
    return id;
}

HfLlamaConfig read_hf_llama_config(const fs::path& model_dir) {
    const fs::path file = model_dir / "config.json";
    const json config = read_config_json(file, "a Hugging Face model directory");

    // Which family reads a directory is the model registry's to say (model/family.cpp); this
    // reader takes the two types it knows how to read.
    const json* type = value_of(config, "model_type");
    WEFT_CHECK(!type || *type == "llama" || *type == "mixtral",
               "{}: model_type is {}, expected \"llama\" or \"mixtral\"", file.string(),
               type ? type->dump() : "");
    const bool mixtral = type && *type == "mixtral";
    const char* causal_lm = mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM";
    // Other heads on the same body (LlamaForSequenceClassification, ...) have other tensors.
    if (const json* arch = value_of(config, "architectures"))
        WEFT_CHECK(*arch == json::array({causal_lm}), "{}: architectures is {}, expected [\"{}\"]",
                   file.string(), arch->dump(), causal_lm);
    // LlamaConfig has no sliding window (transformers ignores the key); MixtralConfig has one.
    std::vector<HfModelKey> keys = {
        {"hidden_act", {"silu"}, "weft's MLP is SwiGLU: silu(gate) x up"},
        {"attention_bias", {false}, "weft's Llama has no biases in its attention projections"},
        {"mlp_bias", {false}, "weft's Llama has no biases in its MLP projections"},
        // transformers' RoPE reads it from any config: a fraction of each head left unrotated.
        {"partial_rotary_factor", {1}, "weft rotates every dimension of each head"},
    };
    if (mixtral) keys.push_back({"sliding_window", {}, "weft's attention has no sliding window"});
    check_model_keys(config, file, keys);

    HfLlamaConfig c;
    c.hidden_size = positive_int(config, "hidden_size", file);
    c.intermediate_size = positive_int(config, "intermediate_size", file);
    c.num_hidden_layers = positive_int(config, "num_hidden_layers", file);
    c.num_attention_heads = positive_int(config, "num_attention_heads", file);
    c.vocab_size = positive_int(config, "vocab_size", file);
    c.max_position_embeddings = positive_int(config, "max_position_embeddings", file);

    c.num_key_value_heads = value_of(config, "num_key_value_heads")
                                ? positive_int(config, "num_key_value_heads", file)
                                : c.num_attention_heads;
    WEFT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
               "{}: num_attention_heads {} is not divisible by num_key_value_heads {} (each "
               "key-value head serves a whole group of query heads)",
               file.string(), c.num_attention_heads, c.num_key_value_heads);
    if (value_of(config, "head_dim")) {
        c.head_dim = positive_int(config, "head_dim", file);
    } else {
        WEFT_CHECK(c.hidden_size % c.num_attention_heads == 0,
                   "{}: hidden_size {} is not divisible by num_attention_heads {}: head_dim x "
                   "heads != hidden without an explicit head_dim",
                   file.string(), c.hidden_size, c.num_attention_heads);
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }

    c.rms_norm_eps = number_or(config, "rms_norm_eps", c.rms_norm_eps, file);
    read_rope(config, file, c);
    if (mixtral) {
        // MixtralConfig's defaults: 8 experts, top 2, aux coefficient 0.001.
        c.num_local_experts = value_of(config, "num_local_experts")
                                  ? positive_int(config, "num_local_experts", file)
                                  : 8;
        c.num_experts_per_tok = value_of(config, "num_experts_per_tok")
                                    ? positive_int(config, "num_experts_per_tok", file)
                                    : 2;
        WEFT_CHECK(c.num_experts_per_tok <= c.num_local_experts,
                   "{}: num_experts_per_tok {} is greater than num_local_experts {}", file.string(),
                   c.num_experts_per_tok, c.num_local_experts);
        if (const json* aux = value_of(config, "router_aux_loss_coef")) {
            WEFT_CHECK(aux->is_number() && aux->get<double>() >= 0,
                       "{}: \"router_aux_loss_coef\" is {}, expected a number >= 0", file.string(),
                       aux->dump());
            c.router_aux_loss_coef = aux->get<double>();
        }
    }

    if (const json* tie = value_of(config, "tie_word_embeddings")) {
        WEFT_CHECK(tie->is_boolean(), "{}: \"tie_word_embeddings\" is {}, expected true or false",
                   file.string(), tie->dump());
        c.tie_word_embeddings = tie->get<bool>();
    }
    if (const json* bos = value_of(config, "bos_token_id"))
        c.bos_token_id = token_id(*bos, "bos_token_id", file);
    if (const json* eos = value_of(config, "eos_token_id")) {
        if (eos->is_array()) {
            WEFT_CHECK(!eos->empty(),
                       "{}: \"eos_token_id\" is [], expected a token id or a list "
                       "of them",
                       file.string());
            for (const json& id : *eos)
                c.eos_token_ids.push_back(token_id(id, "eos_token_id", file));
            c.eos_token_id = c.eos_token_ids[0];
        } else {
            c.eos_token_id = token_id(*eos, "eos_token_id", file);
        }
    }
    return c;
}

void write_hf_llama_config(const fs::path& model_dir, const HfLlamaConfig& c) {
    const fs::path file = model_dir / "config.json";
    WEFT_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0 &&
                   c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.head_dim > 0 &&
                   c.vocab_size > 0 && c.max_position_embeddings > 0,
               "cannot write {}: sizes must be positive, got hidden_size {} intermediate_size {} "
               "num_hidden_layers {} num_attention_heads {} num_key_value_heads {} head_dim {} "
               "vocab_size {} max_position_embeddings {}",
               file.string(), c.hidden_size, c.intermediate_size, c.num_hidden_layers,
               c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size,
               c.max_position_embeddings);
    WEFT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
               "cannot write {}: num_attention_heads {} is not divisible by num_key_value_heads {}",
               file.string(), c.num_attention_heads, c.num_key_value_heads);
    WEFT_CHECK(c.rms_norm_eps > 0 && c.rope_theta > 0,
               "cannot write {}: rms_norm_eps {} and rope_theta {} must be positive", file.string(),
               c.rms_norm_eps, c.rope_theta);
    const HfRopeScaling& r = c.rope_scaling;
    WEFT_CHECK(r.type.empty() || r.type == "linear" || r.type == "llama3",
               "cannot write {}: rope_scaling type \"{}\", expected \"\" (none), \"linear\" or "
               "\"llama3\"",
               file.string(), r.type);
    WEFT_CHECK(r.type.empty() || r.factor > 0,
               "cannot write {}: rope_scaling.factor {} must be "
               "positive",
               file.string(), r.factor);
    WEFT_CHECK(
        r.type != "llama3" || (r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0 &&
                               r.original_max_position_embeddings > 0),
        "cannot write {}: llama3 rope_scaling needs 0 < low_freq_factor ({}) < "
        "high_freq_factor ({}) and a positive original_max_position_embeddings ({})",
        file.string(), r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
    WEFT_CHECK(c.bos_token_id >= -1 && c.eos_token_id >= -1,
               "cannot write {}: bos_token_id {} and eos_token_id {} must be token ids or -1 "
               "(none)",
               file.string(), c.bos_token_id, c.eos_token_id);
    WEFT_CHECK(c.eos_token_ids.empty() || c.eos_token_ids[0] == c.eos_token_id,
               "cannot write {}: eos_token_ids starts with {} but eos_token_id is {} (expected the "
               "list to start with it)",
               file.string(), c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0], c.eos_token_id);
    for (int64_t id : c.eos_token_ids)
        WEFT_CHECK(id >= 0, "cannot write {}: eos_token_ids holds {}, expected token ids >= 0",
                   file.string(), id);

    json rope_scaling = nullptr;
    if (r.type == "linear") {
        rope_scaling = {{"factor", r.factor}, {"rope_type", "linear"}};
    } else if (r.type == "llama3") {
        rope_scaling = {{"factor", r.factor},
                        {"high_freq_factor", r.high_freq_factor},
                        {"low_freq_factor", r.low_freq_factor},
                        {"original_max_position_embeddings", r.original_max_position_embeddings},
                        {"rope_type", "llama3"}};
    }
    // An unset id is written as null rather than left out: left out, transformers would use
    // LlamaConfig's defaults (1 and 2), which are arbitrary tokens of another vocabulary.
    auto id_or_null = [](int64_t id) { return id >= 0 ? json(id) : json(nullptr); };
    const json eos = c.eos_token_ids.empty() ? id_or_null(c.eos_token_id) : json(c.eos_token_ids);
    // Keys as LlamaConfig.to_json_string writes them (sorted); weft trains without dropout.
    WEFT_CHECK(c.num_local_experts >= 0 && c.num_experts_per_tok <= c.num_local_experts &&
                   (c.num_local_experts == 0 || c.num_experts_per_tok > 0),
               "cannot write {}: num_experts_per_tok {} must be between 1 and num_local_experts {}",
               file.string(), c.num_experts_per_tok, c.num_local_experts);
    // The keys LlamaConfig and MixtralConfig share (nlohmann::json keeps them sorted, as
    // to_json_string writes them), then each architecture's own.
    json config = {
        {"attention_dropout", 0.0},
        {"bos_token_id", id_or_null(c.bos_token_id)},
        {"eos_token_id", eos},
        {"head_dim", c.head_dim},
        {"hidden_act", "silu"},
        {"hidden_size", c.hidden_size},
        {"initializer_range", 0.02},
        {"intermediate_size", c.intermediate_size},
        {"max_position_embeddings", c.max_position_embeddings},
        {"num_attention_heads", c.num_attention_heads},
        {"num_hidden_layers", c.num_hidden_layers},
        {"num_key_value_heads", c.num_key_value_heads},
        {"rms_norm_eps", c.rms_norm_eps},
        {"rope_scaling", rope_scaling},
        {"rope_theta", c.rope_theta},
        {"tie_word_embeddings", c.tie_word_embeddings},
        {"torch_dtype", "float32"},
        {"use_cache", true},
        {"vocab_size", c.vocab_size},
    };
    if (c.num_local_experts > 0) {
        config.update({
            {"architectures", {"MixtralForCausalLM"}},
            {"model_type", "mixtral"},
            {"num_experts_per_tok", c.num_experts_per_tok},
            {"num_local_experts", c.num_local_experts},
            {"output_router_logits", false},
            {"router_aux_loss_coef", c.router_aux_loss_coef},
            {"router_jitter_noise", 0.0},
            {"sliding_window", nullptr},
        });
    } else {
        config.update({
            {"architectures", {"LlamaForCausalLM"}},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"model_type", "llama"},
            {"pretraining_tp", 1},
        });
    }
    write_file_atomic(file, config.dump(2) + "\n");
}

}  // namespace weft::ckpt
