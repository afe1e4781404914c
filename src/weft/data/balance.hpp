#pragma once
// Data-aware balancing of packed documents (weft train --balance, docs/long_context.md): each
// step, the documents of the global batch are assigned to the data-parallel ranks and their rows
// so that each rank's attention work (the sum of n^2 over its documents of n tokens) is even.
//
// The documents are the pieces static packing cuts (packing.hpp: one crossing a window's edge is
// cut there), so every token keeps its context and its target, and the loss is the static run's
// summed in another order. Balancing attention work makes the ranks' token counts uneven (a rank
// holding one long document holds fewer tokens), so rows are no longer full: every rank gets the
// same number of rows of T (at least its windows, in steps of row_step; below), and what a row
// leaves over is padding, in documents of at most kPaddingPiece tokens so that it adds little
// attention work.
//
// How many rows: more rows let the greedy put more documents where it prefers (a rank holding a
// long document needs fewer tokens beside it, the others more), and cost every rank a row of
// padding each. So the candidates are, by rows: the windows kept whole and dealt out heaviest
// first to the least loaded rank (no padding), then the greedy at the windows' rows, and
// row_step more, ... up to the count at which no document is turned away from the rank it
// prefers, or twice the windows' rows.
// Kept: the first candidate whose busiest rank's attention work is within kBalanceSlack of the
// least any candidate reaches: balance first, then the least padding that reaches it.
//
// The greedy is longest first: documents by decreasing length, each to the rank with the least
// attention work so far among those with a row it fits in (ties: fewer tokens, then the lower
// rank), into that rank's fullest row it fits in (best fit). Long documents are spread first;
// the many short ones then level the attention work, landing where it is least.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/data/packing.hpp"

namespace weft::data {

constexpr int64_t kPaddingPiece = 8;
constexpr double kBalanceSlack = 0.05;

// The rows of every data-parallel rank for one step: rank r's are
// rows[r * rows_per_rank, (r + 1) * rows_per_rank).
struct RankRows {
    int64_t rows_per_rank = 0;
    std::vector<Row> rows;
};

// The static layout: rank r takes windows [r * windows.size() / ranks, ...) whole, in order.
RankRows static_rows(std::span<const Row> windows, int ranks);

// The documents of `windows` (the global batch's, each a row of T tokens; their count a
// multiple of ranks * row_step) over `ranks` ranks, as the header says.
RankRows balance_rows(std::span<const Row> windows, int ranks, int64_t T, int64_t row_step);

// What each rank of a layout computes: its tokens (padding excluded), its attention work (the sum
// of n^2 over its documents, padding included: the rank runs it), the padding of all ranks.
struct RankWork {
    std::vector<int64_t> tokens;
    std::vector<double> squares;
    int64_t padding = 0;

    double tokens_ratio() const;   // max / min over the ranks
    double squares_ratio() const;  // max / min over the ranks
    double max_squares() const;
};
RankWork rank_work(const RankRows& layout);

}  // namespace weft::data
