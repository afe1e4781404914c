#pragma once
// Building blocks of the AVX512-BF16 attention (avx512_bf16.cpp): the tile product of
// avx512_tiles.hpp with bf16 operands and _mm512_dpbf16_ps, which multiplies pairs of
// bf16 values and adds both products into one fp32 lane. So each operand holds its contracted
// index in pairs: a 32-bit word is two bf16 values, element 2t in the low half and 2t + 1 in
// the high half (the "VNNI" layout of oneDNN and the Intel manuals). A row of bf16 values read
// as words is already paired along the row; a matrix paired along its columns is packed by
// interleaving two rows (pack_pairs). Included by that file only; needs AVX512-BF16 and BW.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "weft/kernels/attention/avx512_tiles.hpp"
#include "weft/kernels/lanes.hpp"

namespace weft::kernels::detail::avx512 {

// Words of bf16 pairs: contraction index t of a tile covers elements 2t and 2t + 1.
using Pair = uint32_t;

inline __m512bh as_bh(__m512i x) {
    return (__m512bh)x;
}

// 16 lanes of lo and hi as pairs, rounded to bf16 (lanes.hpp).
using lanes::pair_words;

// The micro-kernels' arithmetic on pairs (tiles.hpp's Fma, for bf16): A(r, t) and
// X[t][:] are words of two bf16 values, and every lane gains a_lo·x_lo + a_hi·x_hi in fp32.
struct Bf16Ops {
    using A = Pair;
    using X = __m512bh;
    static constexpr int64_t kGroup = 2;
    static X load(const A* p) { return as_bh(_mm512_loadu_si512(p)); }
    static X load(__mmask16 m, const A* p) { return as_bh(_mm512_maskz_loadu_epi32(m, p)); }
    static X broadcast(A a) { return as_bh(_mm512_set1_epi32(int(a))); }
    static __m512 fma(__m512 acc, X b, X x) { return _mm512_dpbf16_ps(acc, b, x); }
};

// C[M][N] (+)= A[M][2n] · X[2n][N] with A and X in pairs (n pairs of the contraction). The band
// is given in elements; a pair half inside it is computed whole, which is exact because the
// terms a causal mask removes are zeros in the operands (probabilities of masked scores, and
// the zero padding of an odd count).
template <Init I, bool kColMajorA>
void tile_product_bf16(float* c, int64_t ldc, int64_t M, int64_t N, const Pair* a, int64_t lda,
                       const Pair* x, int64_t ldx, int64_t n, const float* rowscale = nullptr,
                       Band band = {}) {
    tile_product<Avx512, I, kColMajorA, Bf16Ops>(c, ldc, M, N, a, lda, x, ldx, n, rowscale, band);
}

// dst[r][:] = src[r][:] for `rows` rows of `cols` bf16 values, into a dense [rows][cols] block
// (pack_rows for bf16).
inline void copy_rows(uint16_t* dst, const uint16_t* src, int64_t lds, int64_t rows, int64_t cols) {
    prefetch_rows(src, lds, std::min(rows, kAhead), cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_rows(src + (r + kAhead) * lds, lds, 1, cols);
        uint16_t* d = dst + r * cols;
        const uint16_t* s = src + r * lds;
        int64_t j = 0;
        for (; j + 32 <= cols; j += 32) _mm512_storeu_si512(d + j, _mm512_loadu_si512(s + j));
        if (j < cols) {
            const __mmask32 m = __mmask32((uint64_t(1) << (cols - j)) - 1);
            _mm512_mask_storeu_epi16(d + j, m, _mm512_maskz_loadu_epi16(m, s + j));
        }
    }
}

// dst[t][c] = pair (src[2t][c], src[2t + 1][c]) for 2t < rows (a missing odd row is zero) and
// c < cols, dst rows ld words apart: bf16 rows paired along the columns' contraction.
inline void pack_pairs(Pair* dst, int64_t ld, const uint16_t* src, int64_t lds, int64_t rows,
                       int64_t cols) {
    const auto widen = [](const uint16_t* p, __mmask16 m) {
        return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    };
    prefetch_rows(src, lds, std::min(rows, kAhead), cols);
    for (int64_t t = 0; 2 * t < rows; ++t) {
        if (2 * t + kAhead < rows)
            prefetch_rows(src + (2 * t + kAhead) * lds, lds,
                          std::min<int64_t>(2, rows - 2 * t - kAhead), cols);
        const uint16_t* r0 = src + 2 * t * lds;
        const bool odd = 2 * t + 1 < rows;
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, cols - j));
            const __m512i hi = odd ? widen(r0 + lds + j, m) : _mm512_setzero_si512();
            const __m512i w = _mm512_or_si512(widen(r0 + j, m), _mm512_slli_epi32(hi, 16));
            if (m == kAll)
                _mm512_storeu_si512(dst + t * ld + j, w);
            else
                _mm512_mask_storeu_epi32(dst + t * ld + j, m, w);
        }
    }
}

// dst[t][r] = the pair src[r][2t], src[r][2t + 1] for r < rows (zero up to `width`) and t < HS/2:
// bf16 rows (paired along themselves) transposed word by word, dst rows kTile apart.
inline void pack_pairs_transposed(Pair* dst, const uint16_t* src, int64_t lds, int64_t rows,
                                  int64_t width, int64_t pairs) {
    transpose_words(dst, rows, width, pairs, [&](int64_t r, int64_t c0, __mmask16 m) {
        return _mm512_maskz_loadu_epi32(m, src + r * lds + 2 * c0);
    });
}

}  // namespace weft::kernels::detail::avx512
