// The AVX2 path of attention.hpp, for CPUs with AVX2 and FMA but no AVX-512 (AMD Zen 1-3, Intel
// before Skylake-SP): the tiled algorithm of tiled.hpp on 8-lane ymm vectors. AVX2 has
// no lane-mask registers, so masks are vectors of all-ones lanes (vmaskmov for tails, blendv for
// the causal edge), and no scalef, so exp2 builds 2ⁿ in the exponent bits.
#include "weft/kernels/attention/paths.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "weft/kernels/attention/tiled.hpp"

namespace weft::kernels::detail {

namespace {

// Lanes 0..7 all ones, then all zeros: the mask of the first n lanes starts at 8 - n.
alignas(64) constexpr int32_t kPrefixTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                  0,  0,  0,  0,  0,  0,  0,  0};

struct Avx2 {
    using reg = __m256;
    using mask = __m256i;
    static constexpr int W = 8;
    // Micro-kernel rows × vectors: 6 × 2 = 12 accumulators, plus two operands and a broadcast,
    // fit the 16 ymm registers (the blocking of BLIS's Haswell kernel).
    static constexpr int kRows = 6, kNV = 2;

    // The first n lanes, n in 0..8.
    static mask prefix(int64_t n) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kPrefixTable + 8 - n));
    }
    static reg zero() { return _mm256_setzero_ps(); }
    static reg set1(float x) { return _mm256_set1_ps(x); }
    static reg load(const float* p) { return _mm256_load_ps(p); }
    static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
    // Masked-off lanes are neither read (no fault past the end of a row) nor written.
    static reg maskz_loadu(mask m, const float* p) { return _mm256_maskload_ps(p, m); }
    static void store(float* p, reg x) { _mm256_store_ps(p, x); }
    static void storeu(float* p, reg x) { _mm256_storeu_ps(p, x); }
    static void mask_storeu(float* p, mask m, reg x) { _mm256_maskstore_ps(p, m, x); }
    static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
    static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
    static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
    static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static reg fmsub(reg a, reg b, reg c) { return _mm256_fmsub_ps(a, b, c); }
    // b in the lanes of m, a elsewhere.
    static reg blend(reg a, mask m, reg b) {
        return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(m));
    }
    static reg maskz(mask m, reg x) { return _mm256_and_ps(x, _mm256_castsi256_ps(m)); }
    static float reduce_add(reg x) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }

    // 2ˣ as 2ⁿ·2ᶠ with f ∈ [-½, ½] and the AVX-512 path's degree-6 series of e^(f·ln2); 2ⁿ is
    // put in the exponent bits, which hold normal numbers only, so x below -126 (masked scores
    // are -inf) gives an exact 0 rather than a denormal: the same sums to float precision.
    // Inputs are at most about 0 (a score minus its running maximum, or a log-probability).
    static reg exp2(reg x) {
        const reg keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
        x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
        const reg n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const reg f = _mm256_sub_ps(x, n);
        reg p = _mm256_set1_ps(1.5403530393381606e-4f);
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-3f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-2f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.2402265069591007f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931471805599453f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
        const __m256i e =
            _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
    }

    // r[i] becomes column i of the 8×8 block whose rows r held.
    static void transpose(reg r[8]) {
        reg t[8], u[8];
        for (int i = 0; i < 4; ++i) {
            t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // Within each 128-bit half h, u[4i + j] holds column 4h + j of rows 4i .. 4i+3.
        for (int i = 0; i < 2; ++i) {
            u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
            u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
            u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
            u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
        }
        for (int j = 0; j < 4; ++j) {
            r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
            r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
        }
    }
};

}  // namespace

void attention_forward_avx2(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& s) {
    tiled::forward<Avx2>(out, lse, q, k, v, s);
}

void attention_backward_avx2(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const AttentionShape& s) {
    tiled::backward<Avx2>(dq, dk, dv, dout, q, k, v, out, lse, s);
}

}  // namespace weft::kernels::detail

#endif  // __AVX2__ && __FMA__
