#pragma once
// Where a TrainState's parameters and AdamW moments come from and go to: a fresh
// initialisation, a Hugging Face model, a weft checkpoint; and the checkpoint a run writes, its
// pipeline stages and tensor-parallel shards assembled into the logical tensors so that any
// layout reads it. Every call is collective over the mesh.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "weft/train/checkpoint.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

// Every parameter from the seed (model::init_params: the same logical model on any layout).
void init_state(TrainState& st, uint64_t seed);
void load_hf_state(TrainState& st, const std::filesystem::path& model_dir);
// Parameters and AdamW moments.
void load_state(TrainState& st, const CheckpointInfo& ck);

// Gathers the logical tensors, one file at a time, to the writer (world rank 0 with model
// parallelism, else dp rank 0), which writes them with save_checkpoint and returns the
// directory (others return an empty path).
std::filesystem::path save_state(TrainState& st, const std::filesystem::path& run_dir, int64_t step,
                                 const nlohmann::json& state);
// What save_state allocates on the writer (0 on the other ranks): ZeRO's gathered buffer and,
// with model parallelism, the logical model.
int64_t save_state_bytes(const TrainState& st);

}  // namespace weft::train
