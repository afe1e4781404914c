#pragma once
// How a global batch splits over the data-parallel ranks and into micro-batches, and whether the
// pipeline schedule can run that many micro-batches: checked before any work, for `weft train`
// and `weft bench train` alike.
#include <cstdint>

#include "weft/core/layout.hpp"

namespace weft::train {

struct BatchSplit {
    int64_t micro = 0;          // sequences per forward pass on a rank
    int64_t micro_batches = 0;  // per optimizer step on a rank (accumulation, or the pipeline's m)
};

// `micro_batch_size` 0 means the rank's whole share (batch / dp). Errors name --batch-size,
// --micro-batch-size and dp; with pp > 1 also a schedule that cannot take the micro-batches
// (interleaving needs a multiple of pp).
BatchSplit split_batch(const Layout& resolved, int64_t batch_size, int64_t micro_batch_size);

// Sequence parallelism beside context parallelism: a rank's micro x seq_len / cp rows must split
// evenly over tp. The error names the flags and a --seq-len that works; found with the batch
// split, before the memory check or the model are built.
void check_sequence_split(const Layout& resolved, int64_t micro, int64_t seq_len);

}  // namespace weft::train
