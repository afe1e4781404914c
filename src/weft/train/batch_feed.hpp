#pragma once
// The data feed of a training run: this rank's rows of each micro-batch, in the single-process
// sample order (data/loader.hpp), into the activations a step runs on; under context parallelism
// only this rank's positions of each sequence.
#include <cstdint>

#include "weft/data/loader.hpp"
#include "weft/model/model.hpp"

namespace weft::train {

class BatchFeed {
  public:
    // `file` must outlive the feed. A rank reads rows [first_row, first_row + rows) of every
    // global batch of `global_batch` sequences, `micro` of them per micro-batch.
    BatchFeed(const data::TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential,
              int64_t global_batch, int64_t first_row, int64_t micro)
        : loader_(file, seq_len, seed, sequential),
          global_batch_(global_batch),
          first_row_(first_row),
          micro_(micro) {}

    // Micro-batch m of optimizer step `step` (0-based) into a.inputs and a.targets.
    void fill(int64_t step, int64_t m, model::Activations& a) const {
        loader_.sample_rows(step, first_row_ + m * micro_, micro_, global_batch_, a.positions,
                            a.inputs.data(), a.targets.data());
    }

  private:
    data::DataLoader loader_;
    int64_t global_batch_, first_row_, micro_;
};

}  // namespace weft::train
