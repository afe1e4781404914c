#pragma once
// What a TrainState weighs: the activation buffers it holds, and the analytic memory estimate
// of the whole rank (model state, activations as its pipeline schedule keeps them, scratch, the
// checkpoint writer's buffers) that a run prints and the benchmark checks against the OS.
#include <cstdint>

#include "weft/train/memory.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

// Bytes of activation buffers this rank holds: one micro-batch's, or what the pipeline schedule
// made it keep at once.
int64_t activation_bytes(const TrainState& st);

// `baseline_rss`: resident bytes before the model was allocated. `micro_batches` per step (a
// pipeline's schedule holds several at once).
MemoryEstimate memory_estimate(const TrainState& st, int64_t baseline_rss,
                               int64_t micro_batches = 1);

}  // namespace weft::train
