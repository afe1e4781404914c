// The AVX-512 path of attention.hpp: the tiled algorithm of attention_tiled.hpp on 16-lane zmm
// vectors, with AVX-512's lane masks for tails and the causal edge.
#include "weft/kernels/attention_paths.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

// GCC 12's intrinsics fill unused sources with _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized reports wherever such an intrinsic is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "weft/kernels/attention_tiled.hpp"

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
    static mask prefix(int64_t n) { return mask((1u << n) - 1); }
    static reg zero() { return _mm512_setzero_ps(); }
    static reg set1(float x) { return _mm512_set1_ps(x); }
    static reg load(const float* p) { return _mm512_load_ps(p); }
    static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
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

    // 2ˣ as 2ⁿ·2ᶠ with f ∈ [-½, ½] and the degree-6 Taylor series of e^(f·ln2) (relative error
    // below 2e-7); scalef applies 2ⁿ. The clamp turns masked scores (-inf) into an exact 0,
    // never NaN.
    static reg exp2(reg x) {
        x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
        const reg n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const reg f = _mm512_sub_ps(x, n);
        reg p = _mm512_set1_ps(1.5403530393381606e-4f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
        return _mm512_scalef_ps(p, n);
    }

    // r[i] becomes column i of the 16×16 block whose rows r held: the classic unpack/shuffle
    // network.
    static void transpose(reg r[16]) {
        reg t[16];
        for (int i = 0; i < 8; ++i) {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // Within each 128-bit lane k, r[4i + j] now holds column 4k + j of rows 4i .. 4i+3.
        for (int i = 0; i < 4; ++i) {
            const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
            const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
            r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        for (int j = 0; j < 4; ++j) {
            const reg w0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
            const reg w1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
            const reg w2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
            const reg w3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
            t[j] = _mm512_shuffle_f32x4(w0, w2, 0x88);
            t[4 + j] = _mm512_shuffle_f32x4(w1, w3, 0x88);
            t[8 + j] = _mm512_shuffle_f32x4(w0, w2, 0xDD);
            t[12 + j] = _mm512_shuffle_f32x4(w1, w3, 0xDD);
        }
        for (int i = 0; i < 16; ++i) r[i] = t[i];
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
