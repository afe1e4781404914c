// The AVX-512 path of attention.hpp: the tiled algorithm of attention_tiled.hpp on 16-lane zmm
// vectors. Lane masks are mask registers (masked loads and stores for tails, a masked move for
// the causal edge), and exp2 is attention_avx512_tiles.hpp's, which the bf16 path shares.
// Measured on Zen 5 against the hand-written copy of the algorithm this path used to be
// (bench_attention, GPT-2 small's shape, alternating runs): the same times within 1-2% at
// T = 256, 1024 and 4096, forward and backward.
#include "weft/kernels/attention_paths.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

#include "weft/kernels/attention_avx512_tiles.hpp"
#include "weft/kernels/attention_tiled.hpp"
#include "weft/kernels/lanes.hpp"

namespace weft::kernels::detail {

namespace {

struct Avx512 {
    using reg = __m512;
    using mask = __mmask16;
    static constexpr int W = 16;
    // Micro-kernel rows × vectors: 6 × 4 = 24 accumulators, plus four operands and a broadcast,
    // fit the 32 zmm registers.
    static constexpr int kRows = 6, kNV = 4;

    // The first n lanes, n in 0..16.
    static mask prefix(int64_t n) { return __mmask16((1u << n) - 1); }
    static reg zero() { return _mm512_setzero_ps(); }
    static reg set1(float x) { return _mm512_set1_ps(x); }
    static reg load(const float* p) { return _mm512_load_ps(p); }
    static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
    // Masked-off lanes are neither read (no fault past the end of a row) nor written.
    static reg maskz_loadu(mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
    static void store(float* p, reg x) { _mm512_store_ps(p, x); }
    static void storeu(float* p, reg x) { _mm512_storeu_ps(p, x); }
    static void mask_storeu(float* p, mask m, reg x) { _mm512_mask_storeu_ps(p, m, x); }
    static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
    static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
    static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
    static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static reg fmsub(reg a, reg b, reg c) { return _mm512_fmsub_ps(a, b, c); }
    // b in the lanes of m, a elsewhere.
    static reg blend(reg a, mask m, reg b) { return _mm512_mask_mov_ps(a, m, b); }
    static reg maskz(mask m, reg x) { return _mm512_maskz_mov_ps(m, x); }
    static float reduce_add(reg x) { return _mm512_reduce_add_ps(x); }
    // Masked scores (-inf) give an exact 0 (the clamp inside).
    static reg exp2(reg x) { return avx512::exp2_avx512(x); }

    // r[i] becomes column i of the 16×16 block whose rows r held.
    static void transpose(reg r[16]) {
        __m512i z[16];
        for (int i = 0; i < 16; ++i) z[i] = _mm512_castps_si512(r[i]);
        lanes::transpose16x16(z);
        for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(z[i]);
    }
};

}  // namespace

void attention_forward_avx512(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s) {
    tiled::forward<Avx512>(out, lse, q, k, v, s);
}

void attention_backward_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s) {
    tiled::backward<Avx512>(dq, dk, dv, dout, q, k, v, out, lse, s);
}

}  // namespace weft::kernels::detail

#endif  // __AVX512F__
