#pragma once
// The data feed of a training run: this rank's rows of each micro-batch, in the single-process
// sample order (data/loader.hpp), into the activations a step runs on; under context parallelism
// only this rank's positions of each sequence; with packed documents (data/packing.hpp) also the
// rows' document boundaries and positions.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "weft/data/loader.hpp"
#include "weft/data/packing.hpp"
#include "weft/model/model.hpp"

namespace weft::train {

class BatchFeed {
  public:
    // `file` must outlive the feed. A rank reads rows [first_row, first_row + rows) of every
    // global batch of `global_batch` sequences, `micro` of them per micro-batch.
    // `docs`: the file's documents, for packed batches; none: one sequence a row.
    BatchFeed(const data::TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential,
              int64_t global_batch, int64_t first_row, int64_t micro,
              std::optional<data::DocumentRows> docs = std::nullopt)
        : loader_(file, seq_len, seed, sequential),
          global_batch_(global_batch),
          first_row_(first_row),
          micro_(micro),
          docs_(std::move(docs)) {}

    // Micro-batch m of optimizer step `step` (0-based) into a.inputs and a.targets (packed:
    // a.positions and a.cu_seqlens too).
    void fill(int64_t step, int64_t m, model::Activations& a) const {
        const int64_t row0 = first_row_ + m * micro_;
        if (!docs_) {
            loader_.sample_rows(step, row0, micro_, global_batch_, a.positions, a.inputs.data(),
                                a.targets.data());
            return;
        }
        loader_.sample_rows(step, row0, micro_, global_batch_, {}, a.inputs.data(),
                            a.targets.data());
        std::vector<int64_t> first(static_cast<size_t>(micro_));
        for (int64_t r = 0; r < micro_; ++r)
            first[size_t(r)] = loader_.window(step, row0 + r, global_batch_) * loader_.seq_len();
        docs_->rows(first, a.positions, a.cu_seqlens);
    }

  private:
    data::DataLoader loader_;
    int64_t global_batch_, first_row_, micro_;
    std::optional<data::DocumentRows> docs_;
};

}  // namespace weft::train
