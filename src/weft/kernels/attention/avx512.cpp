// The AVX-512 path of attention.hpp: the tiled algorithm of tiled.hpp on 16-lane zmm
// vectors (avx512_tiles.hpp's Avx512, which the bf16 path's products run on too).
// Measured on Zen 5 against the hand-written copy of the algorithm this path used to be
// (bench_attention, GPT-2 small's shape, alternating runs): the same times within 1-2% at
// T = 256, 1024 and 4096, forward and backward.
#include "weft/kernels/attention/paths.hpp"

#if defined(__AVX512F__)
#include "weft/kernels/attention/avx512_tiles.hpp"
#include "weft/kernels/attention/tiled.hpp"

namespace weft::kernels::detail {

void attention_forward_avx512(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s) {
    tiled::forward<avx512::Avx512>(out, lse, q, k, v, s);
}

void attention_backward_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s) {
    tiled::backward<avx512::Avx512>(dq, dk, dv, dout, q, k, v, out, lse, s);
}

}  // namespace weft::kernels::detail

#endif  // __AVX512F__
