#pragma once
// The per-document zigzag layout of a micro-batch's packed documents over a context-parallel
// ring of R ranks (docs/long_context.md, "Per-document zigzag"): each document longer than
// split_above(T, R) is cut into 2R pieces of ceil(n / 2R) tokens, rank r taking pieces r and
// 2R-1-r, so that every rank scores the same (query, key) pairs of it; only a document whose
// length is not a multiple of 2R is padded, at the end of its last piece (padding: no loss, no
// keys). A shorter document is kept whole on one rank, longest first on the rank with the least
// attention work among those whose tokens stay within an even share, so that it needs no other
// rank's keys and the many short documents level what the split ones leave.
//
// Against the row's zigzag (balance.hpp) this shares a long document exactly whatever its
// length and place in the row. The feed runs it under the ring and TokenRing and the hybrid's
// ring over its Ulysses groups (fit_rows, doc_blocks), and under Ulysses (fit_rows, doc_order).
// bench/ring_pack_balance.py measures the same rule.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/data/balance.hpp"
#include "weft/data/packing.hpp"

namespace weft::data {

// A quarter of the row's zigzag chunk, T / 8R: measured (docs/long_context.md) to bring the
// busiest rank within 1% of the mean on long-tailed mixes, where splitting only documents
// longer than a chunk leaves it 11-12% over at T = 32768 (a document just under a chunk, kept
// whole, is a rank's whole share), and splitting every document pads 2-3 times more.
inline int64_t split_above(int64_t T, int ring) {
    return T / (8 * int64_t(ring));
}

// One piece on a rank: tokens `seg` of the file (seg.first < 0: padding), at position pos0 of
// its document, which is `doc` (an index into the documents given).
struct DocPiece {
    Segment seg;
    int64_t pos0 = 0, doc = -1;
};

struct DocZigzag {
    int ring = 1;
    // Each rank's pieces, in the order of its rows: a split document's two pieces (r, then
    // 2R-1-r) together, in the documents' order, then the whole ones.
    std::vector<std::vector<DocPiece>> ranks;
    int64_t padding = 0;  // tokens
};

// `docs`: a micro-batch's documents (each no longer than its window, as packing cuts them).
DocZigzag doc_zigzag(std::span<const Segment> docs, int ring, int64_t above);

// Makes every rank's rows exactly `rows` long (the activations' T / cp), which doc_zigzag's
// even share can exceed by its padding and by whole documents that fit nowhere: drops the
// padding pieces (the pieces' document positions keep the calls exact whatever their lengths),
// moves the tail of an over-full rank's last pieces to the ranks with room (cutting a piece
// where it must: its two parts' calls are exact too), then pads each rank at its end (doc -1).
// The documents' real tokens must fit in ring * rows.
void fit_rows(DocZigzag& layout, int64_t rows);

// A row of T tokens as the ring runs it: its documents (its padding segments, --balance's, are
// none) by doc_zigzag at split_above(T, ring), fit to T / ring rows a rank.
DocZigzag fitted_zigzag(const Row& row, int64_t T, int ring);

// One attention kernel call of the layout under a ring: queries at rows [q_row, q_row + Tq) of
// one rank's rows (its pieces, concatenated in order, padding included) against keys at rows
// [k_row, k_row + Tk) of another's (or its own), both of one document, causal by the document
// positions q_pos0 and k_pos0 (kernels::AttentionShape's offsets).
struct DocBlock {
    int64_t q_row, k_row, Tq, Tk, q_pos0, k_pos0;
};
// The calls that score rank q_rank's queries against rank k_rank's keys: one per pair of their
// pieces of a document in which some query sees some key. Over every (q_rank, k_rank) pair,
// every causal (query, key) pair of every document is in exactly one call, and no padding.
std::vector<DocBlock> doc_blocks(const DocZigzag& layout, int q_rank, int k_rank);

// Ulysses (and the hybrid's Ulysses groups) gathers every rank's rows of its heads into one
// sequence: where each of rank r's rows goes in it (slots[r][row]) so that every document is
// whole again, in the documents' order, followed by its padding as a document of its own (it
// sees no real key, and no real query sees it), and the sequence's cu_seqlens
// (kernels/attention/varlen.hpp), for the varlen kernel as today. On fit_rows' result each of
// its padding pieces (doc -1) is a document of its own, after the real ones.
struct DocOrder {
    std::vector<std::vector<int64_t>> slots;
    std::vector<int64_t> cu_seqlens;
};
DocOrder doc_order(const DocZigzag& layout);

// What each rank computes (RankWork, over the ring's ranks): its tokens (padding excluded) and
// attention work, a document of n tokens costing n^2 in all as in balance.hpp.
RankWork rank_work(const DocZigzag& layout);
// The same over a step's rows (layout.ring must be 1: the dp placement), each row a
// fitted_zigzag over `ring` ranks: per (dp rank, ring rank) as rank_work(RankRows) counts them.
RankWork rank_work_per_document(const RankRows& layout, int ring);

}  // namespace weft::data
