#pragma once
// A training run's checkpoints: a save records, beside the weights and moments, the run's
// settings (what --resume checks: seed, batch, learning-rate schedule, ...) and the model's
// routing state; a heartbeat marks each save and the run log each commit. Collective.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "weft/train/heartbeat.hpp"
#include "weft/train/options.hpp"
#include "weft/train/run_log.hpp"
#include "weft/train/state_checkpoint.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

class RunCheckpoints {
  public:
    // `micro`: the micro-batch size the run settled on (recorded with the settings).
    RunCheckpoints(TrainState& st, const TrainOptions& o, int64_t micro, RunLog& log,
                   Heartbeat& heartbeat);

    void save(int64_t step);
    // At a step boundary: commits an asynchronous save once every rank has written it.
    void poll() { saver_.poll(); }
    // Waits for the save in flight and commits it.
    void finish() { saver_.finish(); }

  private:
    nlohmann::json run_state() const;

    TrainState& st_;
    const TrainOptions& o_;
    int64_t micro_;
    Heartbeat& heartbeat_;
    CheckpointSaver saver_;
};

}  // namespace weft::train
