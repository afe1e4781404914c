#pragma once
// Reads and writes the logical tensors of a flat buffer as safetensors: the engine's own
// checkpoints (weft names and orientation), and Hugging Face GPT-2 directories (GPT2LMHeadModel
// names, Conv1D [in, out] orientation, vocabulary unpadded, lm_head tied to wte).
#include <filesystem>
#include <map>
#include <string>

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

// A Hugging Face GPT-2 directory: config.json and model.safetensors.
ModelConfig read_hf_model_config(const std::filesystem::path& dir);
void write_hf_model(const std::filesystem::path& dir, const ModelConfig& cfg,
                    const ParamLayout& layout, const float* flat);

}  // namespace weft::model
