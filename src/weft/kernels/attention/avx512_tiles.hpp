#pragma once
// AVX-512's pieces of attention: the 16-lane vector type Avx512 that tiles.hpp's
// micro-kernels and tiled.hpp's algorithm run on (the fp32 path,
// avx512.cpp), its exp2, and what the AVX512-BF16 path (avx512_bf16.cpp,
// through bf16_tiles.hpp) adds: the online softmax's passes over a score tile, and the
// transposing of strided rows into dense tiles. Needs AVX-512F.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "weft/kernels/attention/tiles.hpp"
#include "weft/kernels/lanes.hpp"

// GCC 12's intrinsics fill unused sources with _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized reports wherever such an intrinsic is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace weft::kernels::detail::avx512 {

// The tiling, its constants and the threads' scratch are tiles.hpp's, shared with the
// fp32 paths; what follows is AVX-512's own.
using tiled::add_rows;
using tiled::Band;
using tiled::Init;
using tiled::kAhead;
using tiled::kLn2;
using tiled::kLog2e;
using tiled::kTile;
using tiled::prefetch_rows;
using tiled::thread_scratch;
using tiled::thread_scratch_buffer;
using tiled::tile_product;
constexpr int kVecs = kTile / 16;

constexpr __mmask16 kAll = 0xFFFF;

// The first `rest` lanes, rest in 1..16.
inline __mmask16 tail_mask(int64_t rest) {
    return __mmask16((1u << rest) - 1);
}

inline __m512i lane_index(int v) {
    return _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                            _mm512_set1_epi32(16 * v));
}

// 2ˣ as 2ⁿ·2ᶠ with f ∈ [-½, ½] and the degree-6 Taylor series of e^(f·ln2) (relative error below
// 2e-7); scalef applies 2ⁿ. The clamp turns masked scores (-inf) into an exact 0, never NaN.
inline __m512 exp2_avx512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// The 16-lane vector type of tiles.hpp: lane masks are mask registers (masked loads
// and stores for tails, a masked move for the causal edge).
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
    static reg exp2(reg x) { return exp2_avx512(x); }

    // r[i] becomes column i of the 16×16 block whose rows r held.
    static void transpose(reg r[16]) {
        __m512i z[16];
        for (int i = 0; i < 16; ++i) z[i] = _mm512_castps_si512(r[i]);
        lanes::transpose16x16(z);
        for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(z[i]);
    }
};

// The online softmax's column pass over a forward score tile (keys × query lanes, rows kTile
// apart): the max over its nk raw scores of lane vector `lane`, masked to -inf where key j is
// after the query (lane < j + shift, on a diagonal tile) and then written back. The scale of the
// scores is applied after, to the max and in the exponent (exp2(s·c - m)), so that this pass
// only reads the tile off the diagonal.
inline __m512 scan_column(float* col, int64_t nk, __m512i lane, int64_t shift, bool diagonal) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    __m512 mx = neg_inf;
    for (int64_t j = 0; j < nk; ++j) {
        __m512 x = _mm512_load_ps(col + j * kTile);
        if (diagonal) {
            const __mmask16 vis = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(int(j + shift)));
            x = _mm512_mask_mov_ps(neg_inf, vis, x);
            _mm512_store_ps(col + j * kTile, x);
        }
        mx = _mm512_max_ps(mx, x);
    }
    return mx;
}

// The end of a forward block: each of its nq query rows' lse from the running max m and sum l
// (in log2 units), and `store(i, d, mask, o)` given its output row's 16-lane pieces o = oacc/l.
template <class Store>
void finish_rows(const __m512 (&m)[kVecs], const __m512 (&l)[kVecs], int64_t nq, float* lse,
                 const float* oacc, int64_t HS, Store&& store) {
    alignas(64) float mrow[kTile], lrow[kTile];
    for (int j = 0; j < kVecs; ++j) {
        _mm512_store_ps(mrow + 16 * j, m[j]);
        _mm512_store_ps(lrow + 16 * j, l[j]);
    }
    for (int64_t i = 0; i < nq; ++i) {
        // A row that saw no key (a block wholly after it) has l = 0: zeros and -inf, not 0·∞.
        const bool seen = lrow[i] > 0.0f;
        lse[i] = seen ? (mrow[i] + std::log2(lrow[i])) * kLn2 : -INFINITY;
        const __m512 inv = _mm512_set1_ps(seen ? 1.0f / lrow[i] : 0.0f);
        for (int64_t d = 0; d < HS; d += 16) {
            const __mmask16 msk = tail_mask(std::min<int64_t>(16, HS - d));
            store(i, d, msk, _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, oacc + i * HS + d), inv));
        }
    }
}

// Backward's P and dS of a (query tile, key block) in one pass over the score tiles S and dP
// (fp32, rows kTile apart, nkv vectors each): P[i][j] = exp2(S[i][j]·c - lse2[i]) for the keys
// j <= rel_i0 + i (visible and < nk), else 0, and dS = P ⊙ (dP - D) with the score scale folded
// in, so that dK and dQ are plain products. Rows go in pairs, the layout bf16 products read:
// emit(i, vk, p, ds) takes vector vk of rows i (even) and i + 1, whose p[1] and ds[1] are zero
// where i + 1 = nq.
template <class Emit>
inline void score_grads(const float* sb, const float* dpb, int64_t nq, int64_t nkv, int64_t rel_i0,
                        int64_t nk, float c, float scale, const float* lse2, const float* D,
                        Emit&& emit) {
    const __m512 cv = _mm512_set1_ps(c), sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < nq; i += 2) {
        const int64_t rows = std::min<int64_t>(2, nq - i);
        for (int64_t vk = 0; vk < nkv; ++vk) {
            __m512 p[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, ds[2] = {p[0], p[1]};
            for (int64_t h = 0; h < rows; ++h) {
                const int64_t off = (i + h) * kTile + 16 * vk;
                const int64_t last = std::min(rel_i0 + i + h, nk - 1);
                const __mmask16 vis =
                    _mm512_cmple_epi32_mask(lane_index(int(vk)), _mm512_set1_epi32(int(last)));
                const __m512 x =
                    _mm512_fmsub_ps(_mm512_load_ps(sb + off), cv, _mm512_set1_ps(lse2[i + h]));
                p[h] = _mm512_maskz_mov_ps(vis, exp2_avx512(x));
                const __m512 g = _mm512_sub_ps(_mm512_load_ps(dpb + off), _mm512_set1_ps(D[i + h]));
                ds[h] = _mm512_mul_ps(p[h], _mm512_mul_ps(g, sc));
            }
            emit(i, vk, p, ds);
        }
    }
}

// dst[c][r] = word c of row r, for r < rows (zero up to `width`, a multiple of 16) and c < cols,
// dst rows kTile apart: 16×16 blocks of 32-bit words transposed in registers. load(r, c0, m)
// gives the words c0 .. c0 + 15 of row r under mask m (zero where m is clear).
template <class Load>
inline void transpose_words(uint32_t* dst, int64_t rows, int64_t width, int64_t cols, Load&& load) {
    for (int64_t r0 = 0; r0 < width; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, cols - c0));
            __m512i z[16];
            for (int i = 0; i < 16; ++i)
                z[i] = r0 + i < rows ? load(r0 + i, c0, m) : _mm512_setzero_si512();
            lanes::transpose16x16(z);
            for (int j = 0; j < 16 && c0 + j < cols; ++j)
                _mm512_store_si512(dst + (c0 + j) * kTile + r0, z[j]);
        }
}

}  // namespace weft::kernels::detail::avx512
