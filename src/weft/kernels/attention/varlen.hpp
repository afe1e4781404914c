#pragma once
// Attention over packed documents (--pack documents): the B*T rows of a batch hold several
// documents each, and a query sees only the keys of its own document, causally. `cu_seqlens`
// lists where each document starts in the flattened B*T rows, then B*T (FlashAttention's
// varlen layout): strictly increasing, 0 first, and every row start b*T among them, so that no
// document crosses a row. q, k, v, out and lse are addressed as attention.hpp addresses a whole
// sequence (B sequences of T, q_pos0 = k_pos0 = 0), so that a batch of one document a row runs
// the same as attention_forward.
//
// Each document runs as its own sequence through the kernel of attention.hpp: its outputs,
// lse and gradients are bit for bit those of the document run alone. Documents too short to
// fill the threads alone run side by side, one a thread.
//
// Ring attention over packed rows (docs/context_parallel.md) scores one block at a time: the
// queries of one contiguous range of a row against the keys of another. The *_block_documents
// kernels run such a block with the documents' mask, a query seeing a key iff both lie in the
// same document and the key is not after it: inside one document that is the kernel's causal
// prefix by position, so each document's part of the block (its queries from its first visible
// key on, against its keys up to its last query) is one kernel call, and a block no document
// spans is no call at all.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/kernels/attention/attention.hpp"

namespace weft::kernels {

// Refuses boundaries that break the rules above for B rows of T (one error naming the first
// bad entry).
void check_cu_seqlens(std::span<const int64_t> cu_seqlens, int64_t B, int64_t T);

// Each row's document starts as positions in the row (row b: the entries of cu_seqlens in
// [b*T, (b+1)*T), less b*T), after check_cu_seqlens: what the block kernels take.
std::vector<std::vector<int64_t>> row_starts(std::span<const int64_t> cu_seqlens, int64_t B,
                                             int64_t T);

void attention_forward_varlen(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s,
                              std::span<const int64_t> cu_seqlens);
// Accumulates into dq, dk, dv, as attention_backward does.
void attention_backward_varlen(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s, std::span<const int64_t> cu_seqlens);

// The bf16 kernels of attention.hpp, per document.
void attention_forward_varlen_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, const AttentionShape& s,
                                   std::span<const int64_t> cu_seqlens);
void attention_backward_varlen_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                                    const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const uint16_t* out, const float* lse, const AttentionShape& s,
                                    std::span<const int64_t> cu_seqlens);

// One block of a row (s.B = 1): queries at positions s.q_pos0 .. s.q_pos0 + Tq, keys at
// s.k_pos0 .. s.k_pos0 + Tk, the row's documents starting at `starts` (strictly increasing, 0
// first; the last document runs to the row's end). Returns false, writing nothing, when no query
// sees a key of the block (the caller skips it); otherwise out and lse as attention_forward
// writes them, a row that sees no key getting lse = -inf and zeros.
bool attention_forward_block_documents(float* out, float* lse, const float* q, const float* k,
                                       const float* v, const AttentionShape& s,
                                       std::span<const int64_t> starts);
// Accumulates the block's share into dq, dk, dv, given the final (merged) out and lse of its
// queries, as attention_backward does.
void attention_backward_block_documents(float* dq, float* dk, float* dv, const float* dout,
                                        const float* q, const float* k, const float* v,
                                        const float* out, const float* lse, const AttentionShape& s,
                                        std::span<const int64_t> starts);
bool attention_forward_block_documents_bf16(uint16_t* out, float* lse, const uint16_t* q,
                                            const uint16_t* k, const uint16_t* v,
                                            const AttentionShape& s,
                                            std::span<const int64_t> starts);
void attention_backward_block_documents_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                                             const uint16_t* q, const uint16_t* k,
                                             const uint16_t* v, const uint16_t* out,
                                             const float* lse, const AttentionShape& s,
                                             std::span<const int64_t> starts);

}  // namespace weft::kernels
