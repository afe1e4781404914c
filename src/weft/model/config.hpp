#pragma once
// The shape of a GPT-2-architecture model, its presets, and the analytic counts (parameters,
// FLOPs, memory) that the trainer, the benchmarks and the planner share.
#include <cstdint>
#include <string>
#include <vector>

namespace weft::model {

struct ModelConfig {
    int64_t vocab_size = 50257;  // real vocabulary (GPT-2 BPE)
    int64_t n_positions = 1024;  // maximum sequence length
    int64_t n_layer = 12;
    int64_t n_head = 12;
    int64_t n_embd = 768;
    float ln_eps = 1e-5f;
    // The embedding table is padded to a multiple of this many rows (llm.c pads to 128; tensor
    // parallelism will pad to 128 * tp). Padding rows are zero and never read.
    int64_t vocab_multiple = 128;

    int64_t padded_vocab() const {
        return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
    }
    int64_t head_dim() const { return n_embd / n_head; }
    // The epsilon as the decimal it was written as (1e-05, not the float's 9.99999974e-06), for
    // config files.
    double ln_eps_decimal() const;

    // Throws weft::Error naming the value when a shape is impossible (width not divisible by
    // heads, non-positive sizes, ...). `where` names the source (preset, file, flag).
    void validate(const std::string& where) const;

    // Parameters of the logical model (vocabulary not padded), as Hugging Face counts them.
    int64_t num_parameters() const;
    // Training FLOPs per token at sequence length T: 6 per parameter per token (forward 2,
    // backward 4) plus causal attention, 6 * n_layer * T * n_embd (QKᵀ and PV, each 2·T·C per
    // token in forward, halved by the causal mask, times 3 for forward and backward).
    double train_flops_per_token(int64_t T) const;
};

// The config a tensor-parallel degree `tp` runs: the vocabulary padded to a multiple of 128 * tp,
// so that every rank's slice of the embedding is a whole number of 128-row blocks. Padding rows
// are never read, so the model (and its loss) is the same; checkpoints hold the unpadded tensors.
ModelConfig config_for_tp(const ModelConfig& cfg, int tp);

// Names: tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl. Unknown names are an error listing them.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace weft::model
