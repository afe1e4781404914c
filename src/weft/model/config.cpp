#include "weft/model/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/model/counts.hpp"
#include "weft/model/family.hpp"
#include "weft/model/limits.hpp"

namespace weft::model {

void ModelConfig::validate(const std::string& where) const {
    const Family& f = model::family(family);  // an unknown family is an error naming it
    auto positive = [&](const char* name, int64_t v) {
        WEFT_CHECK(v > 0, "{}: {} must be positive, got {}", where, name, v);
    };
    positive("vocab_size", vocab_size);
    positive("n_positions", n_positions);
    positive("n_layer", n_layer);
    positive("n_head", n_head);
    positive("n_embd", n_embd);
    positive("vocab_multiple", vocab_multiple);
    WEFT_CHECK(n_kv_head >= 0 && n_inner >= 0 && n_head_dim >= 0,
               "{}: n_kv_head {}, n_inner {} and head_dim {} must not be negative", where,
               n_kv_head, n_inner, n_head_dim);
    WEFT_CHECK(ln_eps > 0, "{}: the norm epsilon must be positive, got {}", where, ln_eps);
    // Token ids and positions are 32-bit, and layers, heads and experts are counted in int:
    // a larger size would overflow somewhere far from here (a 2^40 width died in bad_alloc).
    const std::pair<const char*, int64_t> sizes[] = {
        {"vocab_size", vocab_size}, {"n_positions", n_positions},
        {"n_layer", n_layer},       {"n_head", n_head},
        {"n_embd", n_embd},         {"n_kv_head", n_kv_head},
        {"n_inner", n_inner},       {"head_dim", n_head_dim},
        {"n_experts", n_experts},   {"n_shared_experts", n_shared_experts}};
    for (const auto& [name, v] : sizes)
        WEFT_CHECK(v <= kMaxDimension, "{}: {} {} is past what weft can hold (at most {})", where,
                   name, v, kMaxDimension);
    validate_moe(where);
    f.validate(*this, where);
    long double n = 0;
    try {
        n = parameter_count(*this);
    } catch (const Error& e) {
        fail("{}: {}", where, e.what());  // a tensor too large to count: name the source
    }
    WEFT_CHECK(n <= kMaxParameters,
               "{}: {:.4g} parameters ({} layers) is past what weft can hold (at most 2^53 = {}, "
               "counts being exact in a double); expected fewer layers or a smaller width",
               where, double(n), n_layer, kMaxParameters);
}

void ModelConfig::validate_moe(const std::string& where) const {
    WEFT_CHECK(n_experts >= 0, "{}: n_experts must not be negative, got {}", where, n_experts);
    WEFT_CHECK(n_shared_experts >= 0, "{}: n_shared_experts must not be negative, got {}", where,
               n_shared_experts);
    if (n_experts == 0) {
        WEFT_CHECK(experts_per_token == 0 && n_shared_experts == 0,
                   "{}: experts_per_token {} and n_shared_experts {} without routed experts "
                   "(expected n_experts > 0, or neither)",
                   where, experts_per_token, n_shared_experts);
        return;
    }
    WEFT_CHECK(family == "llama",
               "{}: {} experts in a {} model; only the llama family has mixture-of-experts layers",
               where, n_experts, family);
    WEFT_CHECK(experts_per_token >= 1 && experts_per_token <= n_experts,
               "{}: experts_per_token (top-k) is {}, expected between 1 and n_experts {}", where,
               experts_per_token, n_experts);
    auto non_negative = [&](const char* name, double v) {
        WEFT_CHECK(std::isfinite(v) && v >= 0, "{}: {} must be 0 (off) or positive, got {}", where,
                   name, v);
    };
    non_negative("moe_aux_loss_coef", moe_aux_loss_coef);
    non_negative("moe_z_loss_coef", moe_z_loss_coef);
    non_negative("moe_capacity_factor", moe_capacity_factor);
    non_negative("moe_router_bias_rate", moe_router_bias_rate);
}

double ModelConfig::ln_eps_decimal() const {
    return std::stod(fmt::format("{}", ln_eps));
}

nlohmann::json ModelConfig::to_json() const {
    nlohmann::json j = {{"family", family},
                        {"vocab_size", vocab_size},
                        {"n_positions", n_positions},
                        {"n_layer", n_layer},
                        {"n_head", n_head},
                        {"n_embd", n_embd},
                        {"layer_norm_epsilon", ln_eps_decimal()}};
    if (family != "gpt2") {
        j["n_kv_head"] = kv_heads();
        j["n_inner"] = ffn();
        j["head_dim"] = head_dim();
        j["rope_theta"] = rope_theta;
        j["tie_embeddings"] = tie_embeddings;
        // Only when on: configs and checkpoints from before it read and compare the same.
        if (qkv_bias) j["qkv_bias"] = qkv_bias;
        if (n_experts > 0) {
            j["n_experts"] = n_experts;
            j["experts_per_token"] = experts_per_token;
            j["moe_renormalize"] = moe_renormalize;
            j["moe_aux_loss_coef"] = moe_aux_loss_coef;
            j["moe_z_loss_coef"] = moe_z_loss_coef;
            j["moe_capacity_factor"] = moe_capacity_factor;
            // Only when on: configs and checkpoints from before it read and compare the same.
            if (moe_router_bias_rate != 0) j["moe_router_bias_rate"] = moe_router_bias_rate;
            j["n_shared_experts"] = n_shared_experts;
        }
        if (!rope_scaling.type.empty())
            j["rope_scaling"] = {{"type", rope_scaling.type},
                                 {"factor", rope_scaling.factor},
                                 {"low_freq_factor", rope_scaling.low_freq_factor},
                                 {"high_freq_factor", rope_scaling.high_freq_factor},
                                 {"original_max_position", rope_scaling.original_max_position}};
    }
    return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& where) {
    ModelConfig c;
    auto get = [&](const char* key, auto& out) {
        WEFT_CHECK(j.contains(key) && (j[key].is_number() || j[key].is_boolean()),
                   "{}: model key '{}' missing or not a number", where, key);
        out = j[key].get<std::decay_t<decltype(out)>>();
    };
    auto get_opt = [&](const char* key, auto& out) {
        if (j.contains(key)) get(key, out);
    };
    if (j.contains("family")) {
        WEFT_CHECK(j["family"].is_string(), "{}: model key 'family' is not a string", where);
        c.family = j["family"].get<std::string>();
    }
    get("vocab_size", c.vocab_size);
    get("n_positions", c.n_positions);
    get("n_layer", c.n_layer);
    get("n_head", c.n_head);
    get("n_embd", c.n_embd);
    get("layer_norm_epsilon", c.ln_eps);
    get_opt("n_kv_head", c.n_kv_head);
    get_opt("n_inner", c.n_inner);
    get_opt("head_dim", c.n_head_dim);
    get_opt("rope_theta", c.rope_theta);
    get_opt("tie_embeddings", c.tie_embeddings);
    get_opt("qkv_bias", c.qkv_bias);
    get_opt("n_experts", c.n_experts);
    get_opt("experts_per_token", c.experts_per_token);
    get_opt("moe_renormalize", c.moe_renormalize);
    get_opt("moe_aux_loss_coef", c.moe_aux_loss_coef);
    get_opt("moe_z_loss_coef", c.moe_z_loss_coef);
    get_opt("moe_capacity_factor", c.moe_capacity_factor);
    get_opt("moe_router_bias_rate", c.moe_router_bias_rate);
    get_opt("n_shared_experts", c.n_shared_experts);
    if (j.contains("rope_scaling")) {
        const nlohmann::json& r = j["rope_scaling"];
        WEFT_CHECK(r.is_object() && r.contains("type") && r["type"].is_string(),
                   "{}: model key 'rope_scaling' is not an object with a type", where);
        c.rope_scaling.type = r["type"].get<std::string>();
        c.rope_scaling.factor = r.value("factor", 1.0);
        c.rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0);
        c.rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0);
        c.rope_scaling.original_max_position = r.value("original_max_position", int64_t(8192));
    }
    c.validate(where);
    return c;
}

ModelConfig config_for_tp(const ModelConfig& cfg, int tp) {
    WEFT_CHECK(tp >= 1, "tensor-parallel degree {} must be at least 1", tp);
    ModelConfig c = cfg;
    c.vocab_multiple = 128 * int64_t(tp);
    return c;
}

ModelConfig model_preset(const std::string& name) {
    for (const Family* f : families())
        for (const auto& [preset, cfg] : f->presets)
            if (preset == name) return cfg;
    fail("unknown model preset '{}'; expected one of: {}", name,
         fmt::join(model_preset_names(), ", "));
}

std::vector<std::string> model_preset_names() {
    std::vector<std::string> names;
    for (const Family* f : families())
        for (const auto& p : f->presets) names.push_back(p.first);
    return names;
}

}  // namespace weft::model
