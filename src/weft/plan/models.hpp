#pragma once
// Model shapes the planner knows: the engine's presets (the gpt2 family), GPT-3 175B, the
// Megatron-LM weak-scaling family, and JSON files of the same shape.
#include <string>
#include <vector>

#include "weft/model/config.hpp"

namespace weft::plan {

struct NamedModel {
    std::string name;
    model::ModelConfig config;
};

// The engine's presets (model::model_preset) plus:
//   gpt3-175b      Brown et al. 2020, Table 2.1: 96 layers, 96 heads, width 12288, context 2048.
//   megatron-1.7b ... megatron-1t: Narayanan et al. 2021 ("Efficient Large-Scale Language Model
//                  Training on GPU Clusters Using Megatron-LM"), Table 1: vocabulary 51200,
//                  sequence 2048, (heads, hidden, layers) from (24, 2304, 24) to (160, 25600, 128).
std::vector<std::string> plan_model_names();
// A preset name, or a JSON file {"name", "vocab_size", "n_positions", "n_layer", "n_head",
// "n_embd"} (errors name the file and key).
NamedModel load_model(const std::string& name_or_path);

// The published layout of a Megatron table row (for comparisons in docs and tests).
struct MegatronRow {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch;
};
const std::vector<MegatronRow>& megatron_table();

}  // namespace weft::plan
