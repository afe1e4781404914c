#pragma once
// Building blocks of the AVX512-BF16 attention (attention_avx512_bf16.cpp, through
// attention_bf16_tiles.hpp): one register-blocked micro-kernel for every tile product, the online
// softmax's passes over a score tile, and the transposing of strided rows into dense tiles. The
// fp32 AVX-512 path (attention_avx512.cpp) runs attention_tiled.hpp and takes only exp2 from
// here. Needs AVX-512F.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "weft/kernels/attention_tiles.hpp"
#include "weft/kernels/lanes.hpp"

// GCC 12's intrinsics fill unused sources with _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized reports wherever such an intrinsic is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace weft::kernels::detail::avx512 {

// The tiling, its constants and the threads' scratch are attention_tiles.hpp's, shared with the
// fp32 paths; what follows is AVX-512's own.
using tiled::Band;
using tiled::Init;
using tiled::kAhead;
using tiled::kLn2;
using tiled::kLog2e;
using tiled::kTile;
using tiled::prefetch_rows;
using tiled::thread_scratch;
using tiled::thread_scratch_buffer;
constexpr int kVecs = kTile / 16;
// Micro-kernel rows: 6 rows × 4 vectors = 24 accumulators, plus four operands and a broadcast,
// fit the 32 zmm registers.
constexpr int kRows = 6;

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

// The arithmetic of a micro-kernel is a policy Ops: what A and X hold, how a vector of X is
// loaded, how an element of A is broadcast, and the multiply-add (attention_bf16_tiles.hpp's
// Bf16Ops multiplies pairs of bf16 values, kGroup = 2 contraction elements a word).

// C[R][NV·16] = init + Σ_{t<n} A(r, t) · X[t][:], with A(r, t) = a[r·lda + t] (row-major A) or
// a[r + t·lda] (column-major A), in Ops' arithmetic. The last vector of each row is masked by
// `last`, so any width works and nothing past it is read or written.
template <class Ops, int R, int NV, Init I, bool kColMajorA>
void micro_kernel(float* c, int64_t ldc, const typename Ops::A* a, int64_t lda,
                  const typename Ops::A* x, int64_t ldx, int64_t n, __mmask16 last,
                  const float* rowscale) {
    // A flat array and unroll pragmas: GCC then keeps every accumulator in a register; with
    // acc[R][NV] and plain loops it spills them all to the stack on every iteration.
    __m512 acc[R * NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            if constexpr (I == Init::zero) {
                acc[r * NV + v] = _mm512_setzero_ps();
            } else {
                const __mmask16 m = v == NV - 1 ? last : kAll;
                acc[r * NV + v] = _mm512_maskz_loadu_ps(m, c + r * ldc + 16 * v);
                if constexpr (I == Init::scale_rows)
                    acc[r * NV + v] = _mm512_mul_ps(acc[r * NV + v], _mm512_set1_ps(rowscale[r]));
            }
        }
    for (int64_t t = 0; t < n; ++t) {
        typename Ops::X xv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV - 1; ++v) xv[v] = Ops::load(x + t * ldx + 16 * v);
        xv[NV - 1] = Ops::load(last, x + t * ldx + 16 * (NV - 1));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const typename Ops::X b = Ops::broadcast(kColMajorA ? a[r + t * lda] : a[r * lda + t]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r * NV + v] = Ops::fma(acc[r * NV + v], b, xv[v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r * NV + v]);
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (NV - 1), last, acc[r * NV + NV - 1]);
    }
}

template <class Ops>
using MicroKernel = void (*)(float*, int64_t, const typename Ops::A*, int64_t,
                             const typename Ops::A*, int64_t, int64_t, __mmask16, const float*);

template <class Ops, Init I, bool kColMajorA, int... Rs>
constexpr std::array<std::array<MicroKernel<Ops>, kVecs>, kRows> make_kernels(
    std::integer_sequence<int, Rs...>) {
    static_assert(kVecs == 4);
    return {
        {{micro_kernel<Ops, Rs + 1, 1, I, kColMajorA>, micro_kernel<Ops, Rs + 1, 2, I, kColMajorA>,
          micro_kernel<Ops, Rs + 1, 3, I, kColMajorA>,
          micro_kernel<Ops, Rs + 1, 4, I, kColMajorA>}...}};
}

// The loop of every tile product: column chunks of 64 outermost so the chunk of X stays in L1
// while every row block of C passes over it, each row block running the micro-kernel of its
// size over the contraction terms its band leaves. The contraction index counts elements of A's
// rows in groups of `group` (1: fp32; 2: attention_bf16_tiles.hpp's bf16 pairs): the band is
// in elements and a group half inside it is run whole.
template <class Kernels, class T>
void tile_loop(const Kernels& kernels, bool col_major_a, float* c, int64_t ldc, int64_t M,
               int64_t N, const T* a, int64_t lda, const T* x, int64_t ldx, int64_t n,
               const float* rowscale, Band band, int64_t group) {
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
        const int64_t width = std::min<int64_t>(kTile, N - n0);
        const int64_t nv = (width + 15) / 16;
        const __mmask16 last = tail_mask(width - 16 * (nv - 1));
        for (int64_t m0 = 0; m0 < M; m0 += kRows) {
            const int64_t rows = std::min<int64_t>(kRows, M - m0);
            int64_t t0 = 0, t1 = n;
            if (band.kind == Band::upper)
                t1 = std::clamp<int64_t>((m0 + rows + band.offset + group - 1) / group, 0, n);
            if (band.kind == Band::lower)
                t0 = std::clamp<int64_t>((m0 + band.offset) / group, 0, n);
            const T* am = col_major_a ? a + m0 + t0 * lda : a + m0 * lda + t0;
            kernels[rows - 1][nv - 1](c + m0 * ldc + n0, ldc, am, lda, x + t0 * ldx + n0, ldx,
                                      std::max<int64_t>(t1 - t0, 0), last,
                                      rowscale ? rowscale + m0 : nullptr);
        }
    }
}

// C[M][N] (+)= A[M][n] · X[n][N] for a tile, in Ops' arithmetic (n counts A's words: pairs of
// contraction elements under Bf16Ops).
template <Init I, bool kColMajorA, class Ops>
void tile_product(float* c, int64_t ldc, int64_t M, int64_t N, const typename Ops::A* a,
                  int64_t lda, const typename Ops::A* x, int64_t ldx, int64_t n,
                  const float* rowscale = nullptr, Band band = {}) {
    static constexpr auto kernels =
        make_kernels<Ops, I, kColMajorA>(std::make_integer_sequence<int, kRows>{});
    tile_loop(kernels, kColMajorA, c, ldc, M, N, a, lda, x, ldx, n, rowscale, band, Ops::kGroup);
}

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

// dst[r][:] += src[r][:] for `rows` rows of `cols` floats.
inline void add_rows(float* dst, int64_t ld, const float* src, int64_t rows, int64_t cols) {
    prefetch_rows(dst, ld, std::min(rows, kAhead), cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_rows(dst + (r + kAhead) * ld, ld, 1, cols);
        float* d = dst + r * ld;
        const float* s = src + r * cols;
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, cols - j));
            _mm512_mask_storeu_ps(
                d + j, m,
                _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + j), _mm512_maskz_loadu_ps(m, s + j)));
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
