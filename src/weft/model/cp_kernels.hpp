#pragma once
// What the context-parallel regions (cp_attention.cpp, cp_token_ring.cpp, cp_ulysses.cpp) share
// to run on fp32 or on bf16 operands (uint16_t, --dtype bf16): the attention kernel in the
// operands' dtype, and how many Buffer floats a run of values takes. lse and gradients are fp32
// either way. And what the two rings share to run the per-document zigzag's calls.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/kernels/attention/varlen.hpp"
#include "weft/kernels/attention/zigzag.hpp"
#include "weft/model/cp_doc_block.hpp"
#include "weft/model/kept_tensor.hpp"

namespace weft::model::cp {

// The Buffer floats that n values of T take.
template <class T>
int64_t floats_of(int64_t n) {
    return (n * int64_t(sizeof(T)) + int64_t(sizeof(float)) - 1) / int64_t(sizeof(float));
}

inline void attend(float* out, float* lse, const float* q, const float* k, const float* v,
                   const kernels::AttentionShape& s) {
    kernels::attention_forward(out, lse, q, k, v, s);
}
inline void attend(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                   const uint16_t* v, const kernels::AttentionShape& s) {
    kernels::attention_forward_bf16(out, lse, q, k, v, s);
}
inline void attend_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* lse,
                            const kernels::AttentionShape& s) {
    kernels::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
}
inline void attend_backward(float* dq, float* dk, float* dv, const uint16_t* dout,
                            const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const uint16_t* out, const float* lse,
                            const kernels::AttentionShape& s) {
    kernels::attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, s);
}

// Packed documents, each causal on its own (kernels/attention/varlen.hpp).
inline void attend(float* out, float* lse, const float* q, const float* k, const float* v,
                   const kernels::AttentionShape& s, std::span<const int64_t> cu) {
    kernels::attention_forward_varlen(out, lse, q, k, v, s, cu);
}
inline void attend(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                   const uint16_t* v, const kernels::AttentionShape& s,
                   std::span<const int64_t> cu) {
    kernels::attention_forward_varlen_bf16(out, lse, q, k, v, s, cu);
}
inline void attend_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* lse,
                            const kernels::AttentionShape& s, std::span<const int64_t> cu) {
    kernels::attention_backward_varlen(dq, dk, dv, dout, q, k, v, out, lse, s, cu);
}
inline void attend_backward(float* dq, float* dk, float* dv, const uint16_t* dout,
                            const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const uint16_t* out, const float* lse, const kernels::AttentionShape& s,
                            std::span<const int64_t> cu) {
    kernels::attention_backward_varlen_bf16(dq, dk, dv, dout, q, k, v, out, lse, s, cu);
}

// Packed documents' mask on one block of a row (kernels/attention/varlen.hpp).
inline bool attend_block(float* out, float* lse, const float* q, const float* k, const float* v,
                         const kernels::AttentionShape& s, std::span<const int64_t> starts) {
    return kernels::attention_forward_block_documents(out, lse, q, k, v, s, starts);
}
inline bool attend_block(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                         const uint16_t* v, const kernels::AttentionShape& s,
                         std::span<const int64_t> starts) {
    return kernels::attention_forward_block_documents_bf16(out, lse, q, k, v, s, starts);
}

// One block's output in fp32 for merging: written to `part` by the fp32 kernel, or by the bf16
// kernel to part16 (s.Tq·NH·HS values) and widened into `part`. With `starts` (packed documents:
// the row's document starts) attention stays inside each document, and false means that no
// query sees a key of the block and nothing was written (the caller skips its merge).
template <class T>
bool attend_fp32(float* part, uint16_t* part16, float* lse, const T* q, const T* k, const T* v,
                 const kernels::AttentionShape& s, std::span<const int64_t> starts = {}) {
    if constexpr (sizeof(T) == sizeof(float)) {
        if (!starts.empty()) return attend_block(part, lse, q, k, v, s, starts);
        attend(part, lse, q, k, v, s);
    } else {
        if (starts.empty()) {
            attend(part16, lse, q, k, v, s);
        } else if (!attend_block(part16, lse, q, k, v, s, starts)) {
            return false;
        }
        widen_bf16(part, part16, s.Tq * s.NH * s.HS);
    }
    return true;
}

// A block's backward, with the documents' mask where `starts` is given.
inline void attend_block_backward(float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* out,
                                  const float* lse, const kernels::AttentionShape& s,
                                  std::span<const int64_t> starts) {
    if (starts.empty()) return attend_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
    kernels::attention_backward_block_documents(dq, dk, dv, dout, q, k, v, out, lse, s, starts);
}
inline void attend_block_backward(float* dq, float* dk, float* dv, const uint16_t* dout,
                                  const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const uint16_t* out, const float* lse,
                                  const kernels::AttentionShape& s,
                                  std::span<const int64_t> starts) {
    if (starts.empty()) return attend_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
    kernels::attention_backward_block_documents_bf16(dq, dk, dv, dout, q, k, v, out, lse, s,
                                                     starts);
}

// The document starts of each of B rows of T (CpAttentionShape::cu_seqlens over the whole
// rows), or B empty rows when there are no documents: what the block kernels above take.
inline std::vector<std::vector<int64_t>> row_starts(std::span<const int64_t> cu, int64_t B,
                                                    int64_t T) {
    if (cu.empty()) return std::vector<std::vector<int64_t>>(static_cast<size_t>(B));
    return kernels::row_starts(cu, B, T);
}

// Whether a ring over z's ranks must turn for rows with these document starts (row_starts): some
// document has positions on two ranks, or the rows are not packed. A micro-batch whose documents
// each lie on one rank (data/balance.hpp places short ones so) needs no other rank's keys.
inline bool documents_cross_ranks(const std::vector<std::vector<int64_t>>& docs,
                                  const kernels::Zigzag& z) {
    for (const std::vector<int64_t>& starts : docs) {
        if (starts.empty()) return true;
        for (size_t i = 0; i < starts.size(); ++i) {
            const int64_t last = i + 1 < starts.size() ? starts[i + 1] - 1 : z.T - 1;
            if (!kernels::zigzag_one_rank(z, starts[i], last)) return true;
        }
    }
    return false;
}

// The per-document zigzag (CpAttentionShape::doc_blocks). The layout's calls with at most `rows`
// queries each (a ring's partial result holds a chunk): a longer call's queries in runs against
// the same keys, each exact by its q_pos0.
inline std::vector<CpDocBlock> calls(std::span<const CpDocBlock> blocks, int64_t rows) {
    std::vector<CpDocBlock> out;
    for (const CpDocBlock& b : blocks)
        for (int64_t i = 0; i < b.Tq; i += rows)
            out.push_back(
                {b.q_row + i, b.k_row, std::min(rows, b.Tq - i), b.Tk, b.q_pos0 + i, b.k_pos0});
    return out;
}

// A call's kernel shape: queries (and dQ) `ldq` floats apart, keys and values dense, its output
// (and dO) dense.
inline kernels::AttentionShape doc_shape(const CpDocBlock& blk, int64_t NH, int64_t NKV, int64_t HS,
                                         int64_t ldq) {
    return kernels::AttentionShape{1,        blk.Tq,  blk.Tk,     NH,  HS,        ldq,
                                   NKV * HS, NH * HS, blk.q_pos0, NKV, blk.k_pos0};
}

// A call's queries' rows of a sequence's [NH][T] running lse, as the merge and the backward
// kernel take them ([NH][Tq]), and back.
inline void lse_rows(float* to, const float* lse, int64_t NH, int64_t T, int64_t row, int64_t Tq) {
    for (int64_t h = 0; h < NH; ++h) std::copy_n(lse + h * T + row, Tq, to + h * Tq);
}
inline void put_lse_rows(float* lse, const float* from, int64_t NH, int64_t T, int64_t row,
                         int64_t Tq) {
    for (int64_t h = 0; h < NH; ++h) std::copy_n(from + h * Tq, Tq, lse + h * T + row);
}

// Folds a call's result (part, dense, and part_lse [NH][Tq]) into the running result of its
// queries: out (their first row, `ldo` floats apart) and seq_lse, the sequence's [NH][T] lse.
// run_lse: NH * Tq floats of scratch.
inline void merge_call(float* out, int64_t ldo, float* seq_lse, int64_t T, const float* part,
                       const float* part_lse, float* run_lse, const CpDocBlock& blk, int64_t NH,
                       int64_t HS) {
    lse_rows(run_lse, seq_lse, NH, T, blk.q_row, blk.Tq);
    kernels::attention_merge(out, run_lse, part, part_lse,
                             kernels::MergeShape{1, blk.Tq, NH, HS, ldo, NH * HS});
    put_lse_rows(seq_lse, run_lse, NH, T, blk.q_row, blk.Tq);
}

}  // namespace weft::model::cp
