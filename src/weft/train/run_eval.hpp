#pragma once
// A training run's evaluations: the mean loss over the first --eval-batches batches of the
// validation file, as a val_loss line of metrics.jsonl and a note. Collective.
#include <cstdint>

#include "weft/data/token_file.hpp"
#include "weft/train/heartbeat.hpp"
#include "weft/train/run_log.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

class RunEvaluation {
  public:
    // `val` (null: the run has no validation file, and run() does nothing) must outlive this.
    RunEvaluation(TrainState& st, const data::TokenFile* val, int64_t batch_size, int64_t batches,
                  RunLog& log, Heartbeat& heartbeat)
        : st_(st), val_(val), B_(batch_size), batches_(batches), log_(log), heartbeat_(heartbeat) {}

    void run(int64_t step);

  private:
    TrainState& st_;
    const data::TokenFile* val_;
    int64_t B_, batches_;
    RunLog& log_;
    Heartbeat& heartbeat_;
};

}  // namespace weft::train
