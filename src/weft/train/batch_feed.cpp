#include "weft/train/batch_feed.hpp"

#include <algorithm>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/data/doc_zigzag.hpp"

namespace weft::train {

BatchFeed::BatchFeed(const data::TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential,
                     int64_t global_batch, int ranks, int rank, int64_t micro,
                     std::optional<data::DocumentRows> docs, bool balance, int ring,
                     std::vector<int64_t> context, data::PerDocument per_document, int cp_rank,
                     bool token_ring)
    : file_(file),
      loader_(file, seq_len, seed, sequential),
      global_batch_(global_batch),
      rank_rows_(global_batch / ranks),
      micro_(micro),
      ranks_(ranks),
      rank_(rank),
      ring_(ring),
      docs_(std::move(docs)),
      balance_(balance),
      context_(std::move(context)),
      per_document_(docs_ && !context_.empty() ? per_document : data::PerDocument::none),
      cp_rank_(cp_rank),
      token_ring_(token_ring) {
    WEFT_CHECK(global_batch % ranks == 0 && rank_rows_ % micro == 0 && (docs_ || !balance),
               "internal: a feed of {} rows over {} ranks, micro-batches of {}{}", global_batch,
               ranks, micro, balance && !docs_ ? ", balanced without documents" : "");
}

void BatchFeed::begin_step(int64_t step) {
    step_ = step;
    if (!docs_) return;
    const int64_t T = loader_.seq_len();
    std::vector<data::Row> windows;
    for (int64_t r = 0; r < global_batch_; ++r)
        windows.push_back(docs_->window(loader_.window(step, r, global_batch_) * T));
    // The per-document zigzag shares each row's documents over the ring itself: placed over the
    // dp ranks only.
    const int ring = per_document_ != data::PerDocument::none ? 1 : ring_;
    layout_ = data::static_rows(windows, ranks_, ring);
    if (!balance_ || ranks_ * ring == 1) return;  // one rank: nothing to balance
    unbalanced_ =
        std::exchange(layout_, data::balance_rows(windows, ranks_, T, micro_, ring, cost_));
}

int64_t BatchFeed::micro_batches() const {
    return (layout_ ? layout_->rows_per_rank : rank_rows_) / micro_;
}

void BatchFeed::read_rows(std::span<const data::Row> rows, int32_t* inputs,
                          int32_t* targets) const {
    int64_t at = 0;
    for (const data::Row& row : rows)
        for (const data::Segment& s : row) {
            if (s.first >= 0) {
                file_.read(s.first, s.len, inputs + at);
                file_.read(s.first + 1, s.len, targets + at);
            } else {
                std::fill_n(inputs + at, s.len, 0);
                std::fill_n(targets + at, s.len, -1);
            }
            at += s.len;
        }
}

void BatchFeed::fill(int64_t m, model::Activations& a) const {
    if (!layout_) {
        const int64_t row0 = rank_ * rank_rows_ + m * micro_;
        loader_.sample_rows(step_, row0, micro_, global_batch_, a.positions, a.inputs.data(),
                            a.targets.data());
        return;
    }
    const int64_t T = loader_.seq_len();
    const std::span<const data::Row> rows(
        layout_->rows.data() + rank_ * layout_->rows_per_rank + m * micro_, size_t(micro_));
    if (context_.empty()) {
        read_rows(rows, a.inputs.data(), a.targets.data());
        return data::row_layout(rows, T, a.positions, a.cu_seqlens);
    }
    if (per_document_ != data::PerDocument::none) return fill_pieces(rows, a);
    // Context parallel: the boundaries of the whole sequences (every cp region masks by them:
    // Ulysses attends to whole rows, the rings to blocks of them), this rank's positions of their
    // tokens and of their documents.
    const size_t whole = size_t(micro_ * T), n = context_.size();
    std::vector<int32_t> inputs(whole), targets(whole);
    std::vector<int64_t> positions;
    read_rows(rows, inputs.data(), targets.data());
    data::row_layout(rows, T, positions, a.cu_seqlens);
    a.positions.resize(size_t(micro_) * n);
    for (int64_t b = 0; b < micro_; ++b)
        for (size_t t = 0; t < n; ++t) {
            const size_t from = size_t(b * T + context_[t]), to = size_t(b) * n + t;
            a.inputs[to] = inputs[from];
            a.targets[to] = targets[from];
            a.positions[to] = positions[from];
        }
}

void BatchFeed::fill_pieces(std::span<const data::Row> rows, model::Activations& a) const {
    const int64_t T = loader_.seq_len(), n = int64_t(context_.size()), cp = T / n;
    // The layout's ranks: the ring's, the hybrid's groups (ring_), or under Ulysses every cp
    // rank. This rank takes layout rank g's rows at the places its positions have in the row's
    // zigzag over R (the hybrid's rank u: the u-th 1/U of each half, as CpAttention's slots).
    const int R = per_document_ == data::PerDocument::order ? int(cp) : ring_;
    const int64_t half = T / (2 * R), g = cp_rank_ / (cp / R);
    WEFT_CHECK(n * cp == T && cp % R == 0 && T % (2 * R) == 0,
               "internal: {} rows a rank of sequences of {} over a layout of {} ranks", n, T, R);
    // The whole rows' boundaries as the other regions take them (the model reads the layout).
    std::vector<int64_t> whole_positions;
    data::row_layout(rows, T, whole_positions, a.cu_seqlens);
    a.positions.assign(rows.size() * size_t(n), 0);
    a.cp_doc_blocks.clear();
    a.cp_doc_order = {};
    std::vector<data::DocZigzag> layouts;
    bool crosses = false;
    for (const data::Row& row : rows) {
        // The row's padding segments (--balance) are no document: fit_rows pads at the end.
        data::DocZigzag& z = layouts.emplace_back(data::fitted_zigzag(row, T, R));
        for (int q = 0; q < R && per_document_ == data::PerDocument::calls; ++q)
            for (int k = 0; k < R && !crosses; ++k)
                crosses = k != q && !data::doc_blocks(z, q, k).empty();
    }
    // No document on two of the ring's ranks (every rank knows it from the batch): one list a
    // row, its own keys', and the ring (the plain one, the hybrid's) does not turn. TokenRing
    // takes R lists a row.
    const bool turn = crosses || token_ring_;
    std::vector<int32_t> inputs(size_t(2 * half)), targets(size_t(2 * half));
    std::vector<int64_t> positions(size_t(2 * half));
    for (size_t b = 0; b < rows.size(); ++b) {
        const data::DocZigzag& z = layouts[b];
        int64_t at = 0;
        for (const data::DocPiece& p : z.ranks[size_t(g)]) {
            const data::Row piece{p.seg};
            read_rows({&piece, 1}, inputs.data() + at, targets.data() + at);
            for (int64_t i = 0; i < p.seg.len; ++i)
                positions[size_t(at + i)] = p.seg.first >= 0 ? p.pos0 + i : 0;
            at += p.seg.len;
        }
        for (int64_t t = 0; t < n; ++t) {
            const int64_t pos = context_[size_t(t)];
            const size_t from = size_t((pos / half >= R ? half : 0) + pos % half),
                         to = b * size_t(n) + size_t(t);
            a.inputs[to] = inputs[from];
            a.targets[to] = targets[from];
            a.positions[to] = positions[from];
        }
        if (per_document_ == data::PerDocument::order) {
            const data::DocOrder order = data::doc_order(z);
            for (const std::vector<int64_t>& slots : order.slots)
                a.cp_doc_order.slots.insert(a.cp_doc_order.slots.end(), slots.begin(), slots.end());
            for (size_t d = 0; d + 1 < order.cu_seqlens.size(); ++d)
                a.cp_doc_order.cu_seqlens.push_back(int64_t(b) * T + order.cu_seqlens[d]);
            continue;
        }
        for (int k = turn ? 0 : int(g); k < (turn ? R : int(g) + 1); ++k) {
            std::vector<model::CpDocBlock>& calls = a.cp_doc_blocks.emplace_back();
            // TokenRing scores rank k's queries (they travel here) against this rank's keys.
            const int q_rank = token_ring_ ? k : int(g), k_rank = token_ring_ ? int(g) : k;
            for (const data::DocBlock& d : data::doc_blocks(z, q_rank, k_rank))
                calls.push_back({d.q_row, d.k_row, d.Tq, d.Tk, d.q_pos0, d.k_pos0});
        }
    }
    if (per_document_ == data::PerDocument::order)
        a.cp_doc_order.cu_seqlens.push_back(int64_t(rows.size()) * T);
}

}  // namespace weft::train
