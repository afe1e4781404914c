#pragma once
// The shape of a model: its family (gpt2, llama) and the sizes every family shares, plus the
// ones only some use. What it counts to (parameters, FLOPs) is model/counts.hpp.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::model {

// Rotary position embedding scaling (Hugging Face's rope_scaling): none, "linear" (positions
// divided by factor) or "llama3" (Llama 3.1's frequency-dependent factor).
struct RopeScalingConfig {
    std::string type;  // "", "linear", "llama3"
    double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
    int64_t original_max_position = 8192;
    bool operator==(const RopeScalingConfig&) const = default;
};

struct ModelConfig {
    std::string family = "gpt2";  // which implementation runs it (family.hpp)
    int64_t vocab_size = 50257;   // real vocabulary (GPT-2 BPE)
    int64_t n_positions = 1024;   // maximum sequence length
    int64_t n_layer = 12;
    int64_t n_head = 12;
    int64_t n_embd = 768;
    float ln_eps = 1e-5f;  // LayerNorm (gpt2) or RMSNorm (llama) epsilon
    // The embedding table is padded to a multiple of this many rows (llm.c pads to 128; tensor
    // parallelism pads to 128 * tp). Padding rows are zero and never read.
    int64_t vocab_multiple = 128;

    // Llama and its kin; 0 means the family's default.
    int64_t n_kv_head = 0;   // key/value heads (grouped-query attention); default n_head
    int64_t n_inner = 0;     // feed-forward width; default 4 * n_embd
    int64_t n_head_dim = 0;  // per-head width; default n_embd / n_head
    double rope_theta = 10000.0;
    RopeScalingConfig rope_scaling;
    bool tie_embeddings = true;  // the output head is the token embedding
    // A bias on the q, k and v projections, none on o_proj (Qwen2; llama.hpp).
    bool qkv_bias = false;

    // Mixture of experts (Llama family; model/moe_block.hpp). With n_experts > 0 every layer's
    // MLP is a router and n_experts SwiGLU experts of width ffn(), experts_per_token (top-k) of
    // which see each token.
    int64_t n_experts = 0;
    int64_t experts_per_token = 0;
    bool moe_renormalize = true;     // the chosen k weights sum to 1 (Mixtral) or not (OLMoE)
    double moe_aux_loss_coef = 0;    // load-balance loss, per layer; 0: off
    double moe_z_loss_coef = 0;      // router z-loss, per layer; 0: off
    double moe_capacity_factor = 0;  // slots per expert, x tokens k / E; 0: dropless
    // Aux-loss-free balancing (DeepSeek-V3): each step every layer's per-expert selection bias
    // moves by this rate x sign(mean load - load) (model/moe_block.hpp); 0: off.
    double moe_router_bias_rate = 0;
    // Experts every token goes through (DeepSeek-MoE's shared experts): one SwiGLU of width
    // n_shared_experts x ffn() beside the routed ones, its output added unweighted.
    int64_t n_shared_experts = 0;

    int64_t padded_vocab() const {
        return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
    }
    int64_t head_dim() const { return n_head_dim ? n_head_dim : n_embd / n_head; }
    int64_t kv_heads() const { return n_kv_head ? n_kv_head : n_head; }
    int64_t ffn() const { return n_inner ? n_inner : 4 * n_embd; }
    // The epsilon as the decimal it was written as (1e-05, not the float's 9.99999974e-06), for
    // config files.
    double ln_eps_decimal() const;

    // Throws weft::Error naming the value when a shape is impossible (width not divisible by
    // heads, non-positive sizes, an unknown family, ...). `where` names the source (preset,
    // file, flag).
    void validate(const std::string& where) const;
    // The mixture-of-experts fields alone (validate runs it).
    void validate_moe(const std::string& where) const;

    // Every field, for checkpoints' state.json; from_json accepts files written before the
    // family key existed (gpt2).
    nlohmann::json to_json() const;
    static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
    bool operator==(const ModelConfig&) const = default;
};

// The config a tensor-parallel degree `tp` runs: the vocabulary padded to a multiple of 128 * tp,
// so that every rank's slice of the embedding is a whole number of 128-row blocks. Padding rows
// are never read, so the model (and its loss) is the same; checkpoints hold the unpadded tensors.
ModelConfig config_for_tp(const ModelConfig& cfg, int tp);

// The presets of every family (gpt2: tiny, gpt2, gpt2-medium, ...; llama: llama-tiny,
// smollm-135m, ...). Unknown names are an error listing them.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace weft::model
