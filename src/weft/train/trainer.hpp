#pragma once
// The training loop: batches from the data loader, forward and backward per micro-batch, gradient
// clipping, AdamW, metrics, evaluation and checkpoints.
#include "weft/train/options.hpp"

namespace weft::train {

struct TrainSummary {
    int64_t first_step = 0, last_step = 0;
    double first_loss = 0, last_loss = 0;
    double val_loss = -1;
    double tokens_per_s = 0;
};

// Validates everything (options, data, model, run directory) before any work or any file is
// written, then trains.
TrainSummary run_training(const TrainOptions& opts);

}  // namespace weft::train
