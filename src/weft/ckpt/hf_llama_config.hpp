#pragma once
// The Hugging Face Llama config.json (LlamaConfig), read to load a pretrained Llama directory and
// written next to exported weights so that transformers' LlamaForCausalLM.from_pretrained loads
// them as is; and the model family a directory holds, to pick the reader.
//
// Reading refuses what weft's Llama does not compute (biases, another activation, RoPE scalings
// other than linear and llama3) instead of loading a model that would give other outputs.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace weft::ckpt {

struct HfRopeScaling {
    std::string type;  // "" (none), "linear", "llama3"
    // linear reads only factor; llama3 all four.
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int64_t original_max_position_embeddings = 8192;

    bool operator==(const HfRopeScaling&) const = default;
};

struct HfLlamaConfig {
    int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0,
            num_key_value_heads = 0, head_dim = 0, vocab_size = 0, max_position_embeddings = 0;
    double rms_norm_eps = 1e-6, rope_theta = 10000;
    HfRopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    // -1: not set (written as null). Kept only to be written back on export.
    int64_t bos_token_id = -1, eos_token_id = -1;
    // When the file lists several end-of-sequence ids (Llama 3.1: [128001, 128008, 128009]):
    // all of them, eos_token_id being the first; empty when it holds a single id.
    std::vector<int64_t> eos_token_ids;
    // Mixtral (MixtralForCausalLM) when num_local_experts > 0: each layer's MLP is a router over
    // that many experts, num_experts_per_tok of which see each token (weights renormalised).
    int64_t num_local_experts = 0, num_experts_per_tok = 0;
    double router_aux_loss_coef = 0.001;

    bool operator==(const HfLlamaConfig&) const = default;
};

// Reads MODEL_DIR/config.json (model_type "llama", or "mixtral" with its expert keys). Defaults as
// transformers' LlamaConfig: num_key_value_heads = num_attention_heads, head_dim = hidden_size /
// num_attention_heads (which must then divide), rms_norm_eps 1e-6, rope_theta 10000, no
// rope_scaling, untied embeddings. Throws naming the key and the file on a missing or non-integer
// size, a model_type other than "llama", architectures other than ["LlamaForCausalLM"], heads not
// divisible by key-value heads, a RoPE scaling other than linear / llama3, or a key that asks for
// a model weft does not compute (check_model_keys): hidden_act other than "silu", attention_bias
// or mlp_bias true, partial_rotary_factor other than 1, Mixtral's sliding_window. Also reads the
// `rope_parameters` dict newer transformers versions write instead of rope_theta and
// rope_scaling.
HfLlamaConfig read_hf_llama_config(const std::filesystem::path& model_dir);

// Writes MODEL_DIR/config.json atomically, with every key transformers writes for a LlamaConfig
// (a MixtralConfig when num_local_experts > 0).
void write_hf_llama_config(const std::filesystem::path& model_dir, const HfLlamaConfig& c);

// What MODEL_DIR/config.json says it is: its "model_type" and its one "architectures" class,
// each empty when absent (or, for architectures, not a list of one string). Which family that
// is, and whether weft has it, is the model registry's to decide (model::read_hf_model_config).
struct HfModelId {
    std::string model_type, architecture;
};
HfModelId read_hf_model_id(const std::filesystem::path& model_dir);

}  // namespace weft::ckpt
