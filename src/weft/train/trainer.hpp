#pragma once
// The training loop: batches from the data loader, forward and backward per micro-batch, gradient
// clipping, AdamW, metrics, evaluation and checkpoints.
#include "weft/train/options.hpp"

namespace weft::train {

// Validates everything (options, data, model, run directory) before any work or any file is
// written, then trains.
void run_training(const TrainOptions& opts);

}  // namespace weft::train
