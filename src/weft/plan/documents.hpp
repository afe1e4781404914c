#pragma once
// What packed documents do to a step's attention (weft train --pack documents [--balance],
// docs/long_context.md), for the planner: a window of T tokens costs the sum of n^2 over its
// documents instead of T^2, and the dp rank that draws the most of it sets the step.
//
// Measured by laying out global batches as the engine does: windows drawn in the loader's order
// (data/loader.hpp, its seed and shuffle) from a document index, cut into their documents
// (data/packing.hpp) and dealt to the dp ranks as they come (static) or balanced over the dp
// ranks and their cp rings (data/balance.hpp, the engine's own code), so the planner prices
// exactly what `weft train` would run on those steps.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/data/balance.hpp"

namespace weft::plan {

// Where the documents come from: a document index (starts, over `tokens` tokens), windows of T.
struct DocumentSource {
    std::vector<int64_t> starts;
    int64_t tokens = 0, seq_len = 0;
    bool balance = false;  // --balance: priced balanced, else static
    uint64_t seed = 1;     // the loader's (weft train --seed)
    int64_t steps = 16;    // global batches laid out
};

// `--doc-lengths SPEC|FILE.bin`: a length distribution (data/synthetic.hpp's lognormal:M:S,
// pareto:M:A, documents up to `max_len`) drawn into an index of at least `tokens` tokens, or a
// token file's own index. Bad input is a weft::Error naming it.
DocumentSource document_source(const std::string& spec, int64_t seq_len, int64_t tokens,
                               int64_t max_len);

// Means over the source's steps, for global batches of `global_batch` windows over `dp` ranks
// in micro-batches of `micro` rows, each rank's rows split over a cp ring of `ring` ranks
// (data::balance_ring); a rank is one of the dp x ring, its squares its share of sum n^2 over
// documents (balance.hpp's rank_work), padding included. `per_document`: the ring runs each row
// as the per-document zigzag (data::per_document), documents placed over dp only and
// counted by doc_zigzag.hpp's rank_work_per_document. `cost`: what balancing predicts a rank's
// step to be (the trainer's, for the same layouts).
struct DocumentMix {
    double attention_kept = 1;    // sum n^2 of the global batch over global_batch * T^2
    double imbalance = 1;         // the busiest rank's squares over the ranks' mean
    double rows = 1;              // rows a rank runs over its global_batch / dp windows (padding)
    double busiest_squares = 0;   // the busiest rank's sum n^2 (static: unbalanced)
    double static_imbalance = 1;  // with balance: what the static layout's would have been
    // busiest_squares in training FLOPs (model::attention_train_flops; set by the cost model,
    // which knows the model).
    double busiest_attention_flops = 0;
};
DocumentMix document_mix(const DocumentSource& src, int64_t global_batch, int dp, int64_t micro,
                         int ring = 1, bool per_document = false, data::StepCost cost = {});

}  // namespace weft::plan
