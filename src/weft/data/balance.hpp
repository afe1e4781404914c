#pragma once
// Data-aware balancing of packed documents (weft train --balance, docs/long_context.md): each
// step, the documents of the global batch are assigned to the data-parallel ranks, their rows,
// and where a rank's rows are split zigzag over a context-parallel ring, to places in those rows
// so that the attention work of every (dp, ring) rank is even: the sum over its queries of the
// keys each sees, a document of n tokens whole on one rank costing it n^2.
//
// The documents are the pieces static packing cuts (packing.hpp: one crossing a window's edge is
// cut there), so every token keeps its context and its target, and the loss is the static run's
// summed in another order. Balancing attention work makes the ranks' token counts uneven (a rank
// holding one long document holds fewer tokens), so rows are no longer full: every rank gets the
// same number of rows of T (at least its windows, in steps of row_step; below), and what a row
// leaves over is padding, in documents of at most kPaddingPiece tokens so that it adds little
// attention work.
//
// Under a ring of R > 1 ranks (kernels/attention/zigzag.hpp) a row's positions belong to the
// ranks by chunks of T / 2R, rank r holding chunks r and 2R-1-r. A document placed inside one
// rank's chunk (a "slot"; the middle rank's two chunks are adjacent, one slot of 2 chunks) is
// whole on that rank: no other rank sees its keys, and a micro-batch whose documents are all so
// placed needs no ring communication at all (ByteScale's dynamic communication). A document
// longer than a chunk may instead span chunks: its queries' work then lands on each chunk's
// rank, the more the later its positions. A short document (at most a chunk) is kept whole on
// one rank whenever some slot has room; padding pieces never cross a chunk's edge.
//
// How many rows: more rows let the greedy put more documents where it prefers (a rank holding a
// long document needs fewer tokens beside it, the others more), and cost every rank a row of
// padding each. So the candidates are, by rows: the windows kept whole and dealt out heaviest
// first to the least loaded rank (no padding), then the greedy at the windows' rows, and
// row_step more, ... up to the count at which no document is turned away from the place it
// prefers, or twice the windows' rows.
// Kept: by the busiest rank's predicted step (StepCost: its attention work plus the linear work
// of its rows, padding included), the fewest rows whose step exceeds the least predicted one by
// at most kBalanceSlack of that one's attention: a padded row is taken only when the attention
// it saves outweighs its linear work. With attention alone (StepCost{}): balance first, then the
// least padding that reaches it. Under a
// ring the whole windows are kept only when no placement fits: they leave documents across
// chunk edges (every micro-batch turns the ring) and the rows' zigzag's imbalance between the
// ring's ranks, however the windows are dealt.
//
// The greedy is longest first: documents by decreasing length, each to the place (dp rank, row,
// position) after which the busiest of the ranks it lands on has the least attention work (ties:
// a short document kept on one rank, then that rank's fewer tokens, then the fullest room it
// fits, then the lower row and position). Long documents are spread first; the many short ones
// then level the attention work, landing where it is least. With R = 1 (no cp, or Ulysses, which
// splits heads and so shares every row's attention evenly) that is: to the dp rank with the
// least work among those with a row it fits in, into that rank's fullest row it fits in.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/core/layout.hpp"
#include "weft/data/packing.hpp"

namespace weft::data {

constexpr int64_t kPaddingPiece = 8;
constexpr double kBalanceSlack = 0.05;

// The ranks each sequence's zigzag chunks are split over, by which documents are placed: cp for
// the ring and TokenRing, the cp / cp_ulysses groups for the hybrid, 1 without cp and under
// Ulysses (which splits heads, so that every cp rank does an even share of each row's attention).
inline int balance_ring(const Layout& l) {
    if (l.cp <= 1 || l.cp_kind == CpKind::ulysses) return 1;
    return l.cp_kind == CpKind::hybrid ? l.cp / l.cp_ulysses : l.cp;
}

// How packed documents are laid out over the cp ranks (docs/long_context.md, "Per-document
// zigzag"): `calls`, each row's documents split zigzag over balance_ring(l) ranks and run as
// kernel calls by the ring, TokenRing or the hybrid's ring (over its groups); `order`, over every
// cp rank, gathered back in document order by Ulysses; `none`, the rows' zigzag: no cp, or
// --balance under TokenRing, Ulysses or the hybrid, whose placement evens the work itself. Under
// the plain ring --balance keeps the per-document layout and places documents over the dp ranks
// only (balance_rows at ring 1).
enum class PerDocument { none, calls, order };
inline PerDocument per_document(const Layout& l, bool balance) {
    if (l.cp <= 1) return PerDocument::none;
    const bool plain_ring = l.cp_kind == CpKind::ring && !l.ring_bidirectional;
    if (balance && !plain_ring) return PerDocument::none;
    return l.cp_kind == CpKind::ulysses ? PerDocument::order : PerDocument::calls;
}
// The ranks each row's per-document layout is counted over (rank_work_per_document), or 1 where
// documents are counted as placed (rank_work over balance_ring(l) ranks, or Ulysses' heads).
inline int per_document_ring(const Layout& l, bool balance) {
    return per_document(l, balance) == PerDocument::calls ? balance_ring(l) : 1;
}

// What a (dp, ring) rank's step is predicted to cost, in any one unit (the trainer and the
// planner: FLOPs, model::attention_train_flops per unit of attention work and
// model::train_flops_per_token(cfg, 0) per token of its rows, padding included: matmuls run on
// padding too).
struct StepCost {
    double per_square = 1;
    double per_token = 0;
};

// The rows of every data-parallel rank for one step: rank r's are
// rows[r * rows_per_rank, (r + 1) * rows_per_rank), each split over a ring of `ring` ranks.
struct RankRows {
    int64_t rows_per_rank = 0;
    std::vector<Row> rows;
    int ring = 1;
};

// The static layout: rank r takes windows [r * windows.size() / ranks, ...) whole, in order.
RankRows static_rows(std::span<const Row> windows, int ranks, int ring = 1);

// The documents of `windows` (the global batch's, each a row of T tokens; their count a
// multiple of ranks * row_step) over `ranks` dp ranks, each splitting its rows over a ring of
// `ring` ranks (T a multiple of 2 ring), as the header says, the row count chosen by `cost`.
RankRows balance_rows(std::span<const Row> windows, int ranks, int64_t T, int64_t row_step,
                      int ring = 1, StepCost cost = {});

// What each rank of a layout computes, per (dp rank, ring rank), index dp * ring + ring rank:
// its tokens (padding excluded), its attention work (the header's; padding included: the rank
// runs it), the padding of all ranks.
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
