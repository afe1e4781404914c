#pragma once
// The data feed of a training run: this rank's rows of each micro-batch, in the single-process
// sample order (data/loader.hpp), into the activations a step runs on; under context parallelism
// only this rank's positions of each sequence. With packed documents (data/packing.hpp) each
// step is laid out first, every data-parallel rank's rows: the loader's windows as they come,
// or with --balance the windows' documents balanced over the ranks and, within each, over its
// context-parallel ring (data/balance.hpp), which may take more rows than the windows, so more
// micro-batches.
#include <cstdint>
#include <optional>
#include <vector>

#include "weft/data/balance.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/packing.hpp"
#include "weft/model/model.hpp"

namespace weft::train {

class BatchFeed {
  public:
    // `file` must outlive the feed. Each of `ranks` data-parallel ranks reads global_batch /
    // ranks rows of every global batch of `global_batch` sequences, this one (`rank`) the
    // rank-th share, `micro` rows per micro-batch. `docs`: the file's documents, for packed
    // batches; none: one sequence a row. `balance`: balance the documents (needs docs).
    // `ring`: the ranks each row's zigzag chunks are split over (data::balance_ring), by which
    // documents are balanced and the layouts' work counted. `context`: this rank's positions of
    // each sequence under context parallelism (empty: all). `per_document` (packed, under
    // context parallelism, data::per_document): each row's documents are laid out by the
    // per-document zigzag over `ring` ranks (calls) or over every cp rank (order, Ulysses), this
    // rank (`cp_rank`) taking its layout rank's pieces, or under the hybrid its 1/U of them, at
    // the places of the row's zigzag `context` holds, instead of the row's zigzag chunks
    // themselves; --balance then places documents over the dp ranks only. `token_ring`: the
    // ring is TokenRing, whose calls with rank k are of k's queries against this rank's keys (the
    // ring's: of this rank's queries against k's).
    BatchFeed(const data::TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential,
              int64_t global_batch, int ranks, int rank, int64_t micro,
              std::optional<data::DocumentRows> docs = std::nullopt, bool balance = false,
              int ring = 1, std::vector<int64_t> context = {},
              data::PerDocument per_document = data::PerDocument::none, int cp_rank = 0,
              bool token_ring = false);

    // --balance: the row count by this predicted step (data::balance_rows); default: attention
    // work alone.
    void set_step_cost(data::StepCost cost) { cost_ = cost; }

    // Lays out step `step` (0-based), before its fill()s.
    void begin_step(int64_t step);
    // The micro-batches of that step on every rank.
    int64_t micro_batches() const;
    // Packed: that step's rows of every rank; with --balance also the static layout it
    // replaced (what the step's metrics compare). Null otherwise.
    const data::RankRows* layout() const { return layout_ ? &*layout_ : nullptr; }
    const data::RankRows* static_layout() const { return unbalanced_ ? &*unbalanced_ : nullptr; }

    // Micro-batch m of that step into a.inputs and a.targets (packed: a.positions and
    // a.cu_seqlens too; per-document: a.cp_doc_blocks or a.cp_doc_order).
    void fill(int64_t m, model::Activations& a) const;

  private:
    // Per-document: this rank's pieces of each row's documents into a's rows, with their
    // positions and the ring's calls or Ulysses' gather order.
    void fill_pieces(std::span<const data::Row> rows, model::Activations& a) const;
    // The tokens of `rows` whole into inputs and targets (padding: token 0, target -1).
    void read_rows(std::span<const data::Row> rows, int32_t* inputs, int32_t* targets) const;

    const data::TokenFile& file_;
    data::DataLoader loader_;
    int64_t global_batch_, rank_rows_, micro_;
    int ranks_, rank_, ring_;
    std::optional<data::DocumentRows> docs_;
    bool balance_;
    std::vector<int64_t> context_;
    data::PerDocument per_document_;
    int cp_rank_;
    bool token_ring_;
    data::StepCost cost_;
    int64_t step_ = 0;
    std::optional<data::RankRows> layout_, unbalanced_;
};

}  // namespace weft::train
