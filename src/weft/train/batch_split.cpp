#include "weft/train/batch_split.hpp"

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"

namespace weft::train {

BatchSplit split_batch(const Layout& l, int64_t batch_size, int64_t micro_batch_size) {
    const int dp = l.dp;
    WEFT_CHECK(micro_batch_size >= 0, "--micro-batch-size must be positive, got {}",
               micro_batch_size);
    if (!micro_batch_size)
        WEFT_CHECK(batch_size % dp == 0,
                   "--batch-size {} is not divisible by the data-parallel degree {}: each rank "
                   "takes an equal share of the global batch",
                   batch_size, dp);
    BatchSplit s;
    s.micro = micro_batch_size ? micro_batch_size : batch_size / dp;
    WEFT_CHECK(batch_size % (s.micro * dp) == 0,
               "--batch-size {} is not a multiple of --micro-batch-size {} x dp {} = {}",
               batch_size, s.micro, dp, s.micro * dp);
    s.micro_batches = batch_size / (s.micro * dp);
    if (l.pp > 1) {
        // A schedule that cannot be built (too few micro-batches for interleaving) is an error
        // now, not at the first step.
        try {
            pipeline::make_schedule(l.pp_schedule, l.pp, l.vpp, int(s.micro_batches));
        } catch (const Error& e) {
            fail(
                "{} (micro-batches per step = --batch-size {} / (--micro-batch-size {} x dp {}) "
                "= {})",
                e.what(), batch_size, s.micro, dp, s.micro_batches);
        }
    }
    return s;
}

void check_sequence_split(const Layout& l, int64_t micro, int64_t T) {
    WEFT_CHECK(!l.sequence_parallel || l.cp == 1 || micro * (T / l.cp) % l.tp == 0,
               "--sequence-parallel with --cp {} and --tp {}: a rank holds micro-batch {} x "
               "--seq-len {} / cp = {} rows, which the tensor-parallel ranks split evenly only "
               "if they are a multiple of --tp {}; use a --seq-len that is a multiple of "
               "2 x cp x tp = {}",
               l.cp, l.tp, micro, T, micro * (T / l.cp), l.tp, 2 * l.cp * l.tp);
}

}  // namespace weft::train
