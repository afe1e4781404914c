#pragma once
// Reads and writes the logical tensors of a flat buffer as safetensors: the engine's own
// checkpoints (weft names and orientation), and Hugging Face directories (each family's names
// and orientation: GPT2LMHeadModel's Conv1D [in, out], LlamaForCausalLM's "model." prefix;
// vocabulary unpadded).
#include <filesystem>
#include <map>
#include <string>

#include "weft/ckpt/hf_weights.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"

namespace weft::model {

enum class Naming {
    weft,  // "h.0.attn.c_attn.weight" as stored, [out, in], with an optional prefix
    hf,    // "transformer.h.0.attn.c_attn.weight", Conv1D weights transposed to [in, out]
};

void write_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                   const ParamLayout& layout, const float* flat, Naming naming,
                   const std::string& prefix = "",
                   const std::map<std::string, std::string>& metadata = {});

// Fills every logical tensor of `flat`; a missing tensor or a wrong shape is an error naming the
// tensor, the expected shape and the file. Hugging Face files may name tensors with or without
// the "transformer." prefix; their extra buffers (attn.bias, lm_head.weight) are ignored.
void read_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                  const ParamLayout& layout, float* flat, Naming naming,
                  const std::string& prefix = "");

// DIR's weights (ckpt::HfWeights::open), checked against the whole model `cfg` before any is
// read: every tensor it has, of its shape, and no other but those transformers drops on load too
// (Family::hf_ignored). Errors name the tensors.
ckpt::HfWeights open_hf_weights(const std::filesystem::path& dir, const ModelConfig& cfg);

// Every logical tensor of `flat` from a Hugging Face directory: model.safetensors or the shards
// of model.safetensors.index.json, F32, BF16 or F16, named and oriented as the family's
// hf_tensor says (with or without the "transformer." / "model." prefix).
// `weights` is open_hf_weights(dir, cfg), opened once for every unit read from it.
void read_hf_weights(const ckpt::HfWeights& weights, const ModelConfig& cfg,
                     const ParamLayout& layout, float* flat);

// A Hugging Face model directory: config.json (its model_type picks the family) and
// model.safetensors.
ModelConfig read_hf_model_config(const std::filesystem::path& dir);
void write_hf_model(const std::filesystem::path& dir, const ModelConfig& cfg,
                    const ParamLayout& layout, const float* flat);

}  // namespace weft::model
