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
    // `docs`: the file's documents, for packed batches; none: one sequence a row. `context`:
    // this rank's positions of each sequence under context parallelism (empty: all).
    BatchFeed(const data::TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential,
              int64_t global_batch, int64_t first_row, int64_t micro,
              std::optional<data::DocumentRows> docs = std::nullopt,
              std::vector<int64_t> context = {})
        : loader_(file, seq_len, seed, sequential),
          global_batch_(global_batch),
          first_row_(first_row),
          micro_(micro),
          docs_(std::move(docs)),
          context_(std::move(context)) {}

    // Micro-batch m of optimizer step `step` (0-based) into a.inputs and a.targets (packed:
    // a.positions and a.cu_seqlens too).
    void fill(int64_t step, int64_t m, model::Activations& a) const {
        const int64_t row0 = first_row_ + m * micro_;
        if (!docs_) {
            loader_.sample_rows(step, row0, micro_, global_batch_, a.positions, a.inputs.data(),
                                a.targets.data());
            return;
        }
        loader_.sample_rows(step, row0, micro_, global_batch_, context_, a.inputs.data(),
                            a.targets.data());
        const int64_t T = loader_.seq_len();
        std::vector<int64_t> first(static_cast<size_t>(micro_));
        for (int64_t r = 0; r < micro_; ++r)
            first[size_t(r)] = loader_.window(step, row0 + r, global_batch_) * T;
        if (context_.empty()) return docs_->rows(first, a.positions, a.cu_seqlens);
        // Context parallel: the boundaries of the whole sequences (every cp region masks by
        // them: Ulysses attends to whole rows, the rings to blocks of them), the positions of
        // this rank's rows.
        std::vector<int64_t> all;
        docs_->rows(first, all, a.cu_seqlens);
        const size_t n = context_.size();
        a.positions.resize(size_t(micro_) * n);
        for (int64_t b = 0; b < micro_; ++b)
            for (size_t t = 0; t < n; ++t)
                a.positions[size_t(b) * n + t] = all[size_t(b * T + context_[t])];
    }

  private:
    data::DataLoader loader_;
    int64_t global_batch_, first_row_, micro_;
    std::optional<data::DocumentRows> docs_;
    std::vector<int64_t> context_;
};

}  // namespace weft::train
