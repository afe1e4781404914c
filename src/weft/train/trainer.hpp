#pragma once
// The training loop, as torchtitan's train.py reads: build the pieces, then step. Its pieces are
// objects of their own: what the run starts from (run_inputs.hpp), the data feed
// (batch_feed.hpp), the rank's model and optimizer state (train_state.hpp), checkpoints
// (run_checkpoints.hpp), evaluation (run_eval.hpp), metrics and progress (run_log.hpp), and
// communication and slow-rank reports (run_comm.hpp).
#include "weft/train/options.hpp"

namespace weft::train {

// Validates everything (options, data, model, run directory) before any work or any file is
// written, then trains.
void run_training(const TrainOptions& opts);

}  // namespace weft::train
