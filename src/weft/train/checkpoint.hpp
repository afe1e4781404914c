#pragma once
// A training checkpoint: RUN_DIR/checkpoints/step_NNNNNN/ with model.safetensors (logical
// tensors), optimizer_m/optimizer_v.safetensors (AdamW moments by the same names) and state.json
// (step, model shape, seed and the data settings that fix the sample order). Written atomically: a
// reader sees either the whole checkpoint or none of it.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "weft/model/config.hpp"
#include "weft/model/params.hpp"

namespace weft::train {

// The tensor files of a checkpoint, in the order save_checkpoint asks for them.
enum class StateTensors { params, exp_avg, exp_avg_sq };
// Gives one file's whole tensors (laid out as `layout`); the pointer may be invalidated by the
// next call, so a writer holds one file's tensors at a time, not three.
using StateSource = std::function<const float*(StateTensors)>;
inline constexpr StateTensors kStateTensorOrder[] = {StateTensors::params, StateTensors::exp_avg,
                                                     StateTensors::exp_avg_sq};

// Writes model.safetensors, optimizer_m.safetensors and optimizer_v.safetensors (asking `source`
// for each in kStateTensorOrder) and state.json; `state` is merged into state.json (step, seed,
// batch settings...).
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const model::ModelConfig& cfg,
                                      const model::ParamLayout& layout, const StateSource& source,
                                      const nlohmann::json& state);

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
