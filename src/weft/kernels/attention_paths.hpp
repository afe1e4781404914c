#pragma once
// The two instruction-set paths behind attention.hpp. Both take validated shapes and run the same
// tiled algorithm; attention.cpp picks one with kernel_isa().
#include "weft/kernels/attention.hpp"

namespace weft::kernels::detail {

// Whether a call has enough work to wake a thread team: tiny calls (a finite-difference test,
// decoding a short prompt) run faster alone than across a barrier on a busy machine.
inline bool worth_threads(const AttentionShape& s) {
    return s.B * s.NH * s.Tq * s.Tk * s.HS > (int64_t(1) << 18);
}

void attention_forward_portable(float* out, float* lse, const float* q, const float* k,
                                const float* v, const AttentionShape& s);
void attention_backward_portable(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out, const float* lse,
                                 const AttentionShape& s);

#if defined(__AVX512F__)
void attention_forward_avx512(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s);
void attention_backward_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s);
#endif

}  // namespace weft::kernels::detail
