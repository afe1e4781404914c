#pragma once
// A trained model to evaluate, sample or export: from a weft checkpoint (or run directory) or a
// Hugging Face model directory of any family weft has (GPT-2, Llama, Mixtral).
#include <filesystem>
#include <memory>

#include "weft/core/buffer.hpp"
#include "weft/model/model.hpp"

namespace weft::train {

struct LoadedModel {
    std::unique_ptr<model::Model> model;
    Buffer params;
};

// Exactly one of the two paths is non-empty; otherwise an error naming both flags.
LoadedModel load_model(const std::filesystem::path& model_dir, const std::filesystem::path& ckpt);

}  // namespace weft::train
