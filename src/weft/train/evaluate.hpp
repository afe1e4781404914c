#pragma once
// Mean loss of a model over the first K batches of a token file, in llm.c's sequential order:
// what `weft eval` prints and what a run logs as val_loss.
#include <cstdint>
#include <functional>

#include "weft/data/token_file.hpp"
#include "weft/model/model.hpp"

namespace weft::train {

struct EvalResult {
    double loss;     // mean over all target tokens
    int64_t tokens;  // target tokens seen
};

// Batches of B sequences of T tokens; the file must hold at least one full batch. `params` is
// the whole flat parameter buffer.
EvalResult evaluate(model::Model& model, const float* params, const data::TokenFile& file,
                    int64_t B, int64_t T, int64_t batches);

// The part of that evaluation one data-parallel rank does: rows [row0, row0 + rows) of each
// batch of B sequences of T tokens, in forward passes of a.B rows (which must divide rows); under
// context parallelism each row cut to this rank's a.positions (a.T of the T). `forward` runs one
// pass on `a` and returns its loss sum. Returns the loss sum (not the mean) and the tokens;
// every rank makes the same number of passes.
EvalResult evaluate_rows(const data::TokenFile& file, int64_t B, int64_t T, int64_t batches,
                         int64_t row0, int64_t rows, model::Activations& a,
                         const std::function<double()>& forward);

}  // namespace weft::train
