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
#include <cstdint>
#include <span>

#include "weft/kernels/attention/attention.hpp"

namespace weft::kernels {

// Refuses boundaries that break the rules above for B rows of T (one error naming the first
// bad entry).
void check_cu_seqlens(std::span<const int64_t> cu_seqlens, int64_t B, int64_t T);

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

}  // namespace weft::kernels
