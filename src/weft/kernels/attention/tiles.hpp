#pragma once
// Building blocks of the vectorised attention paths (tiled.hpp): one register-blocked
// micro-kernel for every tile product, and the packing of strided rows into dense tiles. Written
// once over a vector type V that supplies the primitives of one instruction set (W lanes, masks
// of the first n lanes, loads, stores, FMA, an exp2, a W×W transpose) and its register blocking;
// avx512.cpp and avx2.cpp define V and include this behind their guards;
// the AVX512-BF16 path (avx512_tiles.hpp) takes its tiling, scratch and prefetching.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace weft::kernels::detail::tiled {

// Tile edge: the queries of a forward tile and the keys of a backward tile are its lanes (four
// zmm or eight ymm registers), and 64×64 floats (16 KiB) keep a score tile in L1 beside its
// operands.
constexpr int kTile = 64;
// Rows that streaming loops prefetch ahead: enough misses in flight to cover a trip to L3.
constexpr int64_t kAhead = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A thread's scratch of T, kept between calls: fresh megabytes every call would be fresh pages,
// and faulting them in costs more than a small attention call computes. It only grows; n is
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

// The first min(n, W) lanes of a row of `cols` floats from column j: the mask of every strided
// loop below.
template <class V>
inline typename V::mask cols_from(int64_t j, int64_t cols) {
    return V::prefix(std::min<int64_t>(V::W, cols - j));
}

// How the accumulators start: zero, from C, or from C times a per-row factor (the online
// softmax's rescaling of the output, folded into the load).
enum class Init { zero, load, scale_rows };

// The arithmetic of a micro-kernel: what A and X hold, how a vector of X is loaded, how an
// element of A is broadcast, and the multiply-add into an fp32 accumulator. Fma<V> is fp32's;
// bf16_tiles.hpp's Bf16Ops multiplies pairs of bf16 values, kGroup = 2 contraction
// elements a word.
template <class V>
struct Fma {
    using A = float;
    using X = typename V::reg;
    static constexpr int64_t kGroup = 1;
    static X load(const A* p) { return V::loadu(p); }
    static X load(typename V::mask m, const A* p) { return V::maskz_loadu(m, p); }
    static X broadcast(A a) { return V::set1(a); }
    static typename V::reg fma(typename V::reg acc, X b, X x) { return V::fmadd(b, x, acc); }
};

// C[R][NV·W] = init + Σ_{t<n} A(r, t) · X[t][:], with A(r, t) = a[r·lda + t] (row-major A) or
// a[r + t·lda] (column-major A), in Ops' arithmetic. The last vector of each row is masked by
// `last`, so any width works and nothing past it is read or written.
template <class V, class Ops, int R, int NV, Init I, bool kColMajorA>
void micro_kernel(float* c, int64_t ldc, const typename Ops::A* a, int64_t lda,
                  const typename Ops::A* x, int64_t ldx, int64_t n, typename V::mask last,
                  const float* rowscale) {
    using reg = typename V::reg;
    constexpr int W = V::W;
    // A flat array and unroll pragmas: GCC then keeps every accumulator in a register; with
    // acc[R][NV] and plain loops it spills them all to the stack on every iteration.
    reg acc[R * NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            if constexpr (I == Init::zero) {
                acc[r * NV + v] = V::zero();
            } else {
                acc[r * NV + v] = v == NV - 1 ? V::maskz_loadu(last, c + r * ldc + W * v)
                                              : V::loadu(c + r * ldc + W * v);
                if constexpr (I == Init::scale_rows)
                    acc[r * NV + v] = V::mul(acc[r * NV + v], V::set1(rowscale[r]));
            }
        }
    for (int64_t t = 0; t < n; ++t) {
        typename Ops::X xv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV - 1; ++v) xv[v] = Ops::load(x + t * ldx + W * v);
        xv[NV - 1] = Ops::load(last, x + t * ldx + W * (NV - 1));
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
        for (int v = 0; v < NV - 1; ++v) V::storeu(c + r * ldc + W * v, acc[r * NV + v]);
        V::mask_storeu(c + r * ldc + W * (NV - 1), last, acc[r * NV + NV - 1]);
    }
}

template <class V, class Ops>
using MicroKernel = void (*)(float*, int64_t, const typename Ops::A*, int64_t,
                             const typename Ops::A*, int64_t, int64_t, typename V::mask,
                             const float*);

// kernels[R - 1][NV - 1] for R <= V::kRows rows and NV <= V::kNV vectors.
template <class V, class Ops, Init I, bool kColMajorA, int R, int... NVs>
constexpr std::array<MicroKernel<V, Ops>, V::kNV> kernel_row(std::integer_sequence<int, NVs...>) {
    return {micro_kernel<V, Ops, R, NVs + 1, I, kColMajorA>...};
}
template <class V, class Ops, Init I, bool kColMajorA, int... Rs>
constexpr std::array<std::array<MicroKernel<V, Ops>, V::kNV>, V::kRows> make_kernels(
    std::integer_sequence<int, Rs...>) {
    return {
        kernel_row<V, Ops, I, kColMajorA, Rs + 1>(std::make_integer_sequence<int, V::kNV>{})...};
}

// Which terms of a contraction a causal mask leaves: row r of C needs terms t with
// t <= r + offset (upper) or t >= r + offset (lower). On a diagonal tile this skips the masked
// half (whose probabilities are zero) instead of multiplying by it.
struct Band {
    enum Kind { all, upper, lower } kind = all;
    int64_t offset = 0;
};

// C[M][N] (+)= A[M][n] · X[n][N] for a tile, in Ops' arithmetic: column chunks of 64 outermost
// so the chunk of X stays in L1 while every row block of C passes over it; within a row block,
// the micro-kernel covers kNV·W columns at a time (the whole chunk with AVX-512, a quarter of it
// with AVX2, whose 16 registers hold 6 rows × 2 vectors). n counts A's words, each Ops::kGroup
// contraction elements (pairs of bf16 under Bf16Ops); the band is in elements, and a word half
// inside it is run whole.
template <class V, Init I, bool kColMajorA, class Ops = Fma<V>>
void tile_product(float* c, int64_t ldc, int64_t M, int64_t N, const typename Ops::A* a,
                  int64_t lda, const typename Ops::A* x, int64_t ldx, int64_t n,
                  const float* rowscale = nullptr, Band band = {}) {
    static constexpr auto kernels =
        make_kernels<V, Ops, I, kColMajorA>(std::make_integer_sequence<int, V::kRows>{});
    constexpr int64_t kCols = V::kNV * V::W, g = Ops::kGroup;
    constexpr int kChunks = int((kTile + kCols - 1) / kCols);  // 1 with AVX-512, 4 with AVX2
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
        // The micro-kernel and last-lane mask of each chunk of kCols columns, found once for
        // every row block.
        const int64_t width = std::min<int64_t>(kTile, N - n0);
        // (One chunk is known at compile time with AVX-512: no loop around the micro-kernel.)
        const int chunks = kChunks == 1 ? 1 : int((width + kCols - 1) / kCols);
        int64_t nvs[kChunks];
        typename V::mask lasts[kChunks];
        for (int j = 0; j < chunks; ++j) {
            const int64_t cw = std::min(kCols, width - j * kCols);
            nvs[j] = (cw + V::W - 1) / V::W;
            lasts[j] = V::prefix(cw - V::W * (nvs[j] - 1));
        }
        for (int64_t m0 = 0; m0 < M; m0 += V::kRows) {
            const int64_t rows = std::min<int64_t>(V::kRows, M - m0);
            int64_t t0 = 0, t1 = n;
            if (band.kind == Band::upper)
                t1 = std::clamp<int64_t>((m0 + rows + band.offset + g - 1) / g, 0, n);
            if (band.kind == Band::lower) t0 = std::clamp<int64_t>((m0 + band.offset) / g, 0, n);
            const auto* am = kColMajorA ? a + m0 + t0 * lda : a + m0 * lda + t0;
            for (int j = 0; j < chunks; ++j) {
                const int64_t c0 = n0 + j * kCols;
                kernels[rows - 1][nvs[j] - 1](c + m0 * ldc + c0, ldc, am, lda, x + t0 * ldx + c0,
                                              ldx, std::max<int64_t>(t1 - t0, 0), lasts[j],
                                              rowscale ? rowscale + m0 : nullptr);
            }
        }
    }
}

// Asks for rows of a strided tile ahead of use: a tile's rows lie 9 KiB apart in the fused qkv
// layout, which the hardware prefetchers do not follow, so they arrive while the previous tile
// computes instead of stalling its packing.
// Whole tiles go to L2 only (T1): into L1 they would evict the tiles being computed on.
template <_mm_hint kHint = _MM_HINT_T0, class T>
inline void prefetch_rows(const T* p, int64_t ld, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; j += 64 / int64_t(sizeof(T)))
            _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + j), kHint);
        _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + cols - 1), kHint);
    }
}

// dst[r][:] += src[r][:] for `rows` rows of `cols` floats.
template <class V>
void add_rows(float* dst, int64_t ld, const float* src, int64_t rows, int64_t cols) {
    prefetch_rows(dst, ld, std::min(rows, kAhead), cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_rows(dst + (r + kAhead) * ld, ld, 1, cols);
        float* d = dst + r * ld;
        const float* s = src + r * cols;
        for (int64_t j = 0; j < cols; j += V::W) {
            const auto m = cols_from<V>(j, cols);
            V::mask_storeu(d + j, m, V::add(V::maskz_loadu(m, d + j), V::maskz_loadu(m, s + j)));
        }
    }
}

// dst[r][:] = src[r][:], into a dense [rows][cols] block. Tiles are packed before the micro-kernels
// broadcast from them: rows of the fused qkv layout lie 9 KiB apart, so the 64 rows of a tile
// fall into a handful of L1 sets and evict one another.
template <class V>
void pack_rows(float* dst, const float* src, int64_t ld, int64_t rows, int64_t cols) {
    prefetch_rows(src, ld, std::min(rows, kAhead), cols);
    for (int64_t r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_rows(src + (r + kAhead) * ld, ld, 1, cols);
        for (int64_t j = 0; j < cols; j += V::W) {
            const auto m = cols_from<V>(j, cols);
            V::mask_storeu(dst + r * cols + j, m, V::maskz_loadu(m, src + r * ld + j));
        }
    }
}

// dst[c][r] = scale · src[r][c] for r < rows (zero up to `width`, a multiple of W) and c < cols,
// dst rows kTile apart: W×W blocks transposed in registers.
template <class V>
void pack_transposed(float* dst, const float* src, int64_t ld, int64_t rows, int64_t width,
                     int64_t cols, float scale) {
    constexpr int W = V::W;
    const typename V::reg sc = V::set1(scale);
    for (int64_t r0 = 0; r0 < width; r0 += W)
        for (int64_t c0 = 0; c0 < cols; c0 += W) {
            const auto m = cols_from<V>(c0, cols);
            typename V::reg r[W];
            for (int i = 0; i < W; ++i)
                r[i] = r0 + i < rows ? V::mul(V::maskz_loadu(m, src + (r0 + i) * ld + c0), sc)
                                     : V::zero();
            V::transpose(r);
            for (int i = 0; i < W; ++i)
                if (c0 + i < cols) V::store(dst + (c0 + i) * kTile + r0, r[i]);
        }
}

}  // namespace weft::kernels::detail::tiled
