#pragma once
// The softmax's exponential, for the softmax row loops (softmax_rows.cpp) that the fused
// classifier and its vocabulary-parallel phases share.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/kernels/simd.hpp"

namespace weft::kernels::detail {

// exp(x) below e^-60 is flushed to 0: such a term changes no float sum of at least 1 (the row
// maximum contributes 1), and keeping it would make scale*p denormal, which slows the GEMMs
// that read dlogits.
constexpr float kExpCutoff = -60.0f;

// Cephes-style expf: exp(x) = 2^n · p(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two
// so r is exact), p a degree-6 polynomial; relative error about 2 ulp. Valid for x <= 0, the
// only inputs here (logit minus row maximum).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float exp_nonpositive(float x) {
    if (!(x >= kExpCutoff)) return 0.0f;
    float n = std::nearbyint(x * kLog2e);
    float r = x - n * kLn2Hi - n * kLn2Lo;
    float p = ((((kP0 * r + kP1) * r + kP2) * r + kP3) * r + kP4) * r + kP5;
    p = p * r * r + r + 1.0f;
    // 2^n by its exponent bits; n is in [-87, 0], well inside the normal range.
    int32_t bits = (int32_t(n) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

// The vector exp_nonpositive's bits in scalar code, its fused multiply-adds spelled out (the
// form above rounds each product): for a portable path that must give the vector path's bits.
inline float exp_nonpositive_fused(float x) {
    if (!(x >= kExpCutoff)) return 0.0f;
    const float n = std::nearbyint(x * kLog2e);
    float r = std::fma(-n, kLn2Hi, x);
    r = std::fma(-n, kLn2Lo, r);
    float p = kP0;
    for (float c : {kP1, kP2, kP3, kP4, kP5}) p = std::fma(p, r, c);
    p = std::fma(p * r, r, r + 1.0f);
    return std::ldexp(p, int(n));  // exact: the result is normal, as scalef's
}

#if defined(__AVX512F__)
inline __m512 exp_nonpositive(__m512 x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpCutoff), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kP0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}
#endif

}  // namespace weft::kernels::detail
