#pragma once
// Loads and stores for elementwise kernels that run on fp32 or on bf16 bit patterns (--dtype bf16
// keeps activations so). bf16 is widened exactly on load (it is the top half of an fp32) and
// rounded to nearest even on store, so a kernel written once over these gives, on bf16, the fp32
// kernel's bits on the widened input, rounded once at the end.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels::lanes {

inline float load(const float* p) {
    return *p;
}
inline float load(const uint16_t* p) {
    const uint32_t u = uint32_t(*p) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
inline void store(float* p, float x) {
    *p = x;
}
inline void store(uint16_t* p, float x) {
    *p = fp32_to_bf16(x);
}

#if defined(__AVX512F__)
inline __mmask16 tail_mask(int64_t rest) {
    return __mmask16((1u << rest) - 1);
}
inline __m512 load16(const float* p, __mmask16 k = 0xffff) {
    return _mm512_maskz_loadu_ps(k, p);
}
inline void store16(float* p, __m512 x, __mmask16 k = 0xffff) {
    _mm512_mask_storeu_ps(p, k, x);
}
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
inline constexpr bool kBf16Vectors = true;
inline __m512 load16(const uint16_t* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline __m512 load16(const uint16_t* p, __mmask16 k) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
// Unmasked where all 16 lanes are stored, given no mask or a full one: a masked store of 16-bit
// elements runs several times slower on Zen 5 even with every lane set (gelu_backward_bf16's
// rows: 5.2 -> 2.5 ms; bf16 attention's output rows: 9% of its forward block).
inline void store16(uint16_t* p, __m512 x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
}
inline void store16(uint16_t* p, __m512 x, __mmask16 k) {
    if (k == 0xffff) return store16(p, x);
    _mm256_mask_storeu_epi16(p, k, (__m256i)_mm512_cvtneps_pbh(x));
}
// 16 lanes of lo and hi as pairs of bf16 (rounded to nearest even) in 32-bit words: lo_i in
// the low half of word i, hi_i in the high half, the "VNNI" layout _mm512_dpbf16_ps multiplies.
inline __m512i pair_words(__m512 lo, __m512 hi) {
    // cvtne2ps puts its second operand in words 0-15 and the first in 16-31; the permutation
    // interleaves them.
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}
#else
inline constexpr bool kBf16Vectors = false;
#endif

#if defined(__AVX512F__)
// Transposes 16 rows of 16 words in place (z[i][j] <-> z[j][i]): 32-bit, then 64-bit interleaves
// within 128-bit lanes, then two rounds of lane shuffles.
inline void transpose16x16(__m512i (&z)[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    // b[4g + c], lane L: rows 4g..4g+3 at column 4L + c.
    for (int g = 0; g < 16; g += 4) {
        b[g] = _mm512_unpacklo_epi64(a[g], a[g + 2]);
        b[g + 1] = _mm512_unpackhi_epi64(a[g], a[g + 2]);
        b[g + 2] = _mm512_unpacklo_epi64(a[g + 1], a[g + 3]);
        b[g + 3] = _mm512_unpackhi_epi64(a[g + 1], a[g + 3]);
    }
    // Row 4L + c gathers lane L of b[c], b[4 + c], b[8 + c] and b[12 + c].
    for (int c = 0; c < 4; ++c) {
        const __m512i even_lo = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88);
        const __m512i odd_lo = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xdd);
        const __m512i even_hi = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88);
        const __m512i odd_hi = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xdd);
        z[c] = _mm512_shuffle_i32x4(even_lo, even_hi, 0x88);
        z[8 + c] = _mm512_shuffle_i32x4(even_lo, even_hi, 0xdd);
        z[4 + c] = _mm512_shuffle_i32x4(odd_lo, odd_hi, 0x88);
        z[12 + c] = _mm512_shuffle_i32x4(odd_lo, odd_hi, 0xdd);
    }
}
#endif

// Whether a kernel on T (every operand that is not fp32 is bf16) may take its 16-lane path now:
// the kernel ISA is AVX-512 and, for bf16, AVX512-BF16's rounding is compiled in and usable.
template <typename T>
bool vectors() {
    if constexpr (std::is_same_v<T, uint16_t>)
        return kBf16Vectors && bf16_conversion_vectorised();
    else
        return use_avx512();
}

}  // namespace weft::kernels::lanes
