#pragma once
// Where a TrainState's parameters and optimizer moments come from and go to: a fresh
// initialisation, a Hugging Face model, a weft checkpoint; and the checkpoints a run writes:
// every rank its own shard (checkpoint.hpp says which part), world rank 0 the manifest once all
// are on disk. Every call is collective over the mesh.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "weft/ckpt/shard_writer.hpp"
#include "weft/core/buffer.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

// Every parameter from the seed (model::init_params: the same logical model on any layout).
void init_state(TrainState& st, uint64_t seed);
void load_hf_state(TrainState& st, const std::filesystem::path& model_dir);
// Parameters and optimizer moments (as fp32: Optimizer::write_moment), from a checkpoint of any
// layout.
void load_state(TrainState& st, const CheckpointInfo& ck);

// The part of the state the rank at (tp_rank, dp_rank, stage) writes (checkpoint.hpp); `z` is
// built here and must outlive the ranges.
struct RankPlan {
    int world_rank, tp_rank, tp;
    std::unique_ptr<parallel::ZeroLayout> z;
    std::vector<OwnedRange> owned;
    int ep_rank = 0, ep = 1;  // the expert slice it holds
};
RankPlan plan_rank(const TrainState& st, int world_rank);

// Saves checkpoints as a run goes. save() copies this rank's part of the state into a staging
// buffer and writes it (with --async-checkpoint on a writer thread, training going on); the
// checkpoint is committed (manifest, then `latest`) once every rank's file is on disk: at once
// when synchronous, else at the first step boundary (poll) where a tiny all-reduce finds every
// writer done. At most one save is in flight: a second save commits the first before it starts.
// Synchronous and asynchronous saves write the same files byte for byte.
class CheckpointSaver {
  public:
    // Of a committed save, on this rank: its shard's bytes, the pause to copy the state into the
    // staging buffer, and the write (with digest) itself.
    struct Timing {
        int64_t bytes = 0;
        double stage_s = 0, write_s = 0;
    };
    using Committed = std::function<void(const std::filesystem::path&, const Timing&)>;
    // `committed(dir, timing)` runs on world rank 0 after each commit.
    CheckpointSaver(TrainState& st, std::filesystem::path run_dir, bool async, int keep,
                    Committed committed);
    ~CheckpointSaver();

    // `run`: the settings recorded in the manifest (seed, batch, learning-rate schedule...).
    void save(int64_t step, const nlohmann::json& run);
    // At a step boundary: commits an asynchronous save whose writers have all finished.
    void poll();
    // Waits for the save in flight and commits it (the end of a run).
    void finish();

  private:
    void commit();

    TrainState& st_;
    std::filesystem::path run_dir_;
    bool async_;
    int keep_;
    Committed committed_;
    RankPlan plan_;
    Buffer staging_;  // before writer_: the thread reads it until joined
    ckpt::ShardWriter writer_;
    struct Pending {
        int64_t step;
        nlohmann::json run;
        std::filesystem::path tmp;
    };
    std::optional<Pending> pending_;
    double stage_s_ = 0;
    Timing last_;
};

// Bytes of the staging buffer a save holds on this rank (its part of weights and moments; with
// --offload, one piece of the stream it writes).
int64_t save_state_bytes(const TrainState& st);

}  // namespace weft::train
