#pragma once
// A training checkpoint: RUN_DIR/checkpoints/step_NNNNNN/ with model.safetensors (logical
// tensors), optimizer.safetensors (AdamW moments by the same names) and state.json (step, model
// shape, seed and the data settings that fix the sample order). Written atomically: a reader
// sees either the whole checkpoint or none of it.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "weft/model/config.hpp"
#include "weft/model/params.hpp"

namespace weft::train {

nlohmann::json model_config_json(const model::ModelConfig& c);
model::ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

// `state` is merged into state.json (step, seed, batch settings...). m and v may be null (no
// optimizer state is written then).
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const model::ModelConfig& cfg,
                                      const model::ParamLayout& layout, const float* params,
                                      const float* m, const float* v, const nlohmann::json& state);

struct CheckpointInfo {
    std::filesystem::path dir;
    model::ModelConfig cfg;
    nlohmann::json state;
};
// Accepts a checkpoint directory or a run directory (then its latest checkpoint).
CheckpointInfo open_checkpoint(const std::filesystem::path& dir_or_run);
void load_checkpoint_params(const CheckpointInfo& ck, const model::ParamLayout& layout,
                            float* params);
void load_checkpoint_optimizer(const CheckpointInfo& ck, const model::ParamLayout& layout, float* m,
                               float* v);

}  // namespace weft::train
