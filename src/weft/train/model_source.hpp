#pragma once
// A trained model to evaluate, sample or export: from a weft checkpoint (or run directory) or a
// Hugging Face model directory of any family weft has (GPT-2, Llama, Mixtral).
#include <filesystem>
#include <memory>
#include <optional>

#include "weft/core/buffer.hpp"
#include "weft/model/model.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/train/checkpoint.hpp"

namespace weft::train {

struct LoadedModel {
    std::unique_ptr<model::Model> model;
    Buffer params;
};

// Where a model comes from, opened but not read: its config (a checkpoint's shards already
// checked), so that a command can check its other inputs against it before reading weights.
struct ModelSource {
    std::filesystem::path model_dir;     // a Hugging Face directory, or empty
    std::optional<CheckpointInfo> ckpt;  // a weft checkpoint, or none
    model::ModelConfig cfg;
};

// Exactly one of the two paths is non-empty; otherwise an error naming both flags. A model whose
// fp32 weights the node cannot hold is refused here, before anything is built from its config.
ModelSource open_model_source(const std::filesystem::path& model_dir,
                              const std::filesystem::path& ckpt);
// One path that may be either: a directory with a config.json is a Hugging Face directory, else
// a weft checkpoint or run directory (open_checkpoint's error names it when it is neither).
ModelSource open_model_source(const std::filesystem::path& dir);
// `tp`: this rank's shard of a tensor-parallel group (model::tp_shard) and its model, which sums
// and gathers over it (null: the whole model).
LoadedModel load_model(const ModelSource& source, model::TpComm* tp = nullptr);
LoadedModel load_model(const std::filesystem::path& model_dir, const std::filesystem::path& ckpt);

}  // namespace weft::train
