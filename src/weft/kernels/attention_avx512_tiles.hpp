#pragma once
// Building blocks of the AVX-512 attention (attention_avx512.cpp): one register-blocked
// micro-kernel for every tile product, the exp2 of the softmax, and the packing of strided rows
// into dense tiles. Included by that file only; needs AVX-512F.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

// GCC 12's intrinsics fill unused sources with _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized reports wherever such an intrinsic is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace weft::kernels::detail::avx512 {

// Tile edge: the queries of a forward tile and the keys of a backward tile are its lanes, four zmm
// registers, and 64×64 floats (16 KiB) keep a score tile in L1 beside its operands.
constexpr int kTile = 64;
constexpr int kVecs = kTile / 16;
// Micro-kernel rows: 6 rows × 4 vectors = 24 accumulators, plus four operands and a broadcast,
// fit the 32 zmm registers.
constexpr int kRows = 6;
// Rows that streaming loops prefetch ahead: enough misses in flight to cover a trip to L3.
constexpr int64_t kAhead = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A thread's scratch of T, kept between calls: fresh megabytes every call would be fresh pages,
// and faulting them in costs more than a small attention call computes. It only grows; n() is
// what it holds (one buffer per thread and element type).
template <class T = float>
struct ThreadScratch {
    T* p = nullptr;
    size_t n = 0;
    ~ThreadScratch() { ::operator delete[](p, std::align_val_t{64}); }
};
template <class T = float>
inline ThreadScratch<T>& thread_scratch_buffer() {
    thread_local ThreadScratch<T> buf;
    return buf;
}
template <class T = float>
inline T* thread_scratch(size_t n) {
    ThreadScratch<T>& buf = thread_scratch_buffer<T>();
    if (buf.n < n) {
        ::operator delete[](buf.p, std::align_val_t{64});
        buf.p = nullptr;  // stays consistent if the allocation throws
        buf.n = 0;
        buf.p = static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{64}));
        buf.n = n;
    }
    return buf.p;
}

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

// How the accumulators start: zero, from C, or from C times a per-row factor (the online
// softmax's rescaling of the output, folded into the load).
enum class Init { zero, load, scale_rows };

// C[R][NV·16] = init + Σ_{t<n} A(r, t) · X[t][:], with A(r, t) = a[r·lda + t] (row-major A) or
// a[r + t·lda] (column-major A). The last vector of each row is masked by `last`, so any width
// works and nothing past it is read or written.
template <int R, int NV, Init I, bool kColMajorA>
void micro_kernel(float* c, int64_t ldc, const float* a, int64_t lda, const float* x, int64_t ldx,
                  int64_t n, __mmask16 last, const float* rowscale) {
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
        __m512 xv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV - 1; ++v) xv[v] = _mm512_loadu_ps(x + t * ldx + 16 * v);
        xv[NV - 1] = _mm512_maskz_loadu_ps(last, x + t * ldx + 16 * (NV - 1));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512 b = _mm512_set1_ps(kColMajorA ? a[r + t * lda] : a[r * lda + t]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v)
                acc[r * NV + v] = _mm512_fmadd_ps(b, xv[v], acc[r * NV + v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r * NV + v]);
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (NV - 1), last, acc[r * NV + NV - 1]);
    }
}

using MicroKernel = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t,
                             __mmask16, const float*);

template <Init I, bool kColMajorA, int... Rs>
constexpr std::array<std::array<MicroKernel, kVecs>, kRows> make_kernels(
    std::integer_sequence<int, Rs...>) {
    static_assert(kVecs == 4);
    return {{{micro_kernel<Rs + 1, 1, I, kColMajorA>, micro_kernel<Rs + 1, 2, I, kColMajorA>,
              micro_kernel<Rs + 1, 3, I, kColMajorA>, micro_kernel<Rs + 1, 4, I, kColMajorA>}...}};
}

// Which terms of a contraction a causal mask leaves: row r of C needs terms t with
// t <= r + offset (upper) or t >= r + offset (lower). On a diagonal tile this skips the masked
// half (whose probabilities are zero) instead of multiplying by it.
struct Band {
    enum Kind { all, upper, lower } kind = all;
    int64_t offset = 0;
};

// C[M][N] (+)= A[M][n] · X[n][N] for a tile: column chunks of 64 outermost so the chunk of X
// stays in L1 while every row block of C passes over it.
template <Init I, bool kColMajorA>
void tile_product(float* c, int64_t ldc, int64_t M, int64_t N, const float* a, int64_t lda,
                  const float* x, int64_t ldx, int64_t n, const float* rowscale = nullptr,
                  Band band = {}) {
    static constexpr auto kernels =
        make_kernels<I, kColMajorA>(std::make_integer_sequence<int, kRows>{});
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
        const int64_t width = std::min<int64_t>(kTile, N - n0);
        const int64_t nv = (width + 15) / 16;
        const __mmask16 last = tail_mask(width - 16 * (nv - 1));
        for (int64_t m0 = 0; m0 < M; m0 += kRows) {
            const int64_t rows = std::min<int64_t>(kRows, M - m0);
            int64_t t0 = 0, t1 = n;
            if (band.kind == Band::upper) t1 = std::clamp<int64_t>(m0 + rows + band.offset, 0, n);
            if (band.kind == Band::lower) t0 = std::clamp<int64_t>(m0 + band.offset, 0, n);
            const float* am = kColMajorA ? a + m0 + t0 * lda : a + m0 * lda + t0;
            kernels[rows - 1][nv - 1](c + m0 * ldc + n0, ldc, am, lda, x + t0 * ldx + n0, ldx,
                                      t1 - t0, last, rowscale ? rowscale + m0 : nullptr);
        }
    }
}

// Asks for rows of a strided tile ahead of use: a tile's rows lie 9 KiB apart in the fused qkv
// layout, which the hardware prefetchers do not follow, so they arrive while the previous tile
// computes instead of stalling its packing.
// Whole tiles go to L2 only (T1): into L1 they would evict the tiles being computed on.
template <_mm_hint kHint = _MM_HINT_T0>
inline void prefetch_rows(const float* p, int64_t ld, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; j += 16)
            _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + j), kHint);
        _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + cols - 1), kHint);
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

// dst[r][:] = src[r][:], into a dense [rows][cols] block. Tiles are packed before the micro-kernels
// broadcast from them: rows of the fused qkv layout lie 9 KiB apart, so the 64 rows of a tile
// fall into a handful of L1 sets and evict one another.
inline void pack_rows(float* dst, const float* src, int64_t ld, int64_t rows, int64_t cols) {
    prefetch_rows(src, ld, std::min(rows, kAhead), cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_rows(src + (r + kAhead) * ld, ld, 1, cols);
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, cols - j));
            _mm512_mask_storeu_ps(dst + r * cols + j, m,
                                  _mm512_maskz_loadu_ps(m, src + r * ld + j));
        }
    }
}

// dst[c][r] = scale · src[r][c] for r < rows (zero up to `width`, a multiple of 16) and c < cols,
// dst rows kTile apart: 16×16 blocks transposed in registers (the classic unpack/shuffle network).
inline void pack_transposed(float* dst, const float* src, int64_t ld, int64_t rows, int64_t width,
                            int64_t cols, float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < width; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, cols - c0));
            __m512 r[16], t[16];
            for (int i = 0; i < 16; ++i)
                r[i] = r0 + i < rows
                           ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + (r0 + i) * ld + c0), sc)
                           : _mm512_setzero_ps();
            for (int i = 0; i < 8; ++i) {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
            // Within each 128-bit lane k, r[4i + j] now holds column 4k + j of rows 4i .. 4i+3.
            for (int i = 0; i < 4; ++i) {
                const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
                const __m512d c = _mm512_castps_pd(t[4 * i + 2]),
                              d = _mm512_castps_pd(t[4 * i + 3]);
                r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
                r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
                r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
                r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
            }
            for (int j = 0; j < 4; ++j) {
                const __m512 w0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
                const __m512 w1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
                const __m512 w2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
                const __m512 w3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
                const __m512 col[4] = {
                    _mm512_shuffle_f32x4(w0, w2, 0x88), _mm512_shuffle_f32x4(w1, w3, 0x88),
                    _mm512_shuffle_f32x4(w0, w2, 0xDD), _mm512_shuffle_f32x4(w1, w3, 0xDD)};
                for (int k = 0; k < 4; ++k)
                    if (c0 + 4 * k + j < cols)
                        _mm512_store_ps(dst + (c0 + 4 * k + j) * kTile + r0, col[k]);
            }
        }
}

}  // namespace weft::kernels::detail::avx512
