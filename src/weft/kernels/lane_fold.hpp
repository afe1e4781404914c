#pragma once
// The fold of 16 lane sums that the row-invariant kernels share (matmul_rows, attend_gathered):
// l + (l+8), then + (l+4), + (l+2), + (l+1). One order on every path, so a portable loop that
// keeps 16 lane sums gives the vector path's bits.
#include "weft/kernels/simd.hpp"

namespace weft::kernels::detail {

inline float fold16(const float (&p)[16]) {
    float s1[8], s2[4];
    for (int j = 0; j < 8; ++j) s1[j] = p[j] + p[j + 8];
    for (int j = 0; j < 4; ++j) s2[j] = s1[j] + s1[j + 4];
    return (s2[0] + s2[2]) + (s2[1] + s2[3]);
}

#if defined(__AVX512F__)
inline float fold16(__m512 v) {
    const __m256 s1 =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
    const __m128 s3 = _mm_add_ps(s2, _mm_permute_ps(s2, 0x4e));  // (s2[0]+s2[2]), (s2[1]+s2[3])
    return _mm_cvtss_f32(_mm_add_ss(s3, _mm_permute_ps(s3, 0xb1)));
}

// The fold of four accumulators' lanes at once: lane sums of a, b, c, d in lanes 0-3.
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    // l + (l+8): 128-bit blocks 0,1 + 2,3, two accumulators per register.
    const __m512 ab =
        _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd =
        _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    // + (l+4): one accumulator per block.
    __m512 v =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));  // + (l+2)
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));  // + (l+1)
    const __m512i first = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(first, v));
}
#endif

}  // namespace weft::kernels::detail
