#include "weft/kernels/matmul_rows.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <thread>
#include <type_traits>

#include "weft/core/error.hpp"
#include "weft/kernels/chunk_team.hpp"
#include "weft/kernels/hand_over.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/lane_fold.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/simd.hpp"
#include "weft/kernels/swiglu.hpp"

namespace weft::kernels {

// The order, one for every element, every path, M, tile and thread: 16 running sums, lane l
// taking the products of k ≡ l (mod 16) in increasing k, one fused multiply-add each (bf16:
// lane l takes the pairs k = 32i + 2l, 32i + 2l + 1, the odd product added first, then the
// even, as vdpbf16ps does); then a fixed tree folds the 16 lanes: l + (l+8), then + (l+4), + (l+2),
// + (l+1); then the bias is added. Lanes over K let the weight be read in place, row by row, and
// a register tile of rows x columns folds its sums together, four columns per tree (reduce4).
// The portable path computes the same sequence lane by lane, so both paths give the same bits.

namespace {

constexpr int kLanes = 16;
constexpr int kTileCols = 4;  // one reduce4 per tile row
constexpr int kTileRows = 6;  // 24 accumulators, 4 weight vectors, 1 input vector: 29 registers
// Column tiles of one block at most: their weights (64 rows of K) stay in L2 while every row of
// the input passes over them. Few rows take blocks of one tile (block_tiles).
constexpr int64_t kBlockTiles = 16;
// Up to this many rows a call takes stream_tile (one pass over the weights in the order they
// lie, each weight vector loaded once for all the rows: decode, a verify of one guess)...
constexpr int kStreamRows = 2;
// ... while their inputs fit in half of L1 beside the weights streaming through: one row of the
// input is loaded per weight vector and row, and from L2 that costs more than the stream saves.
// One row streams at any K, its input vector loaded per weight vector either way.
constexpr int64_t kStreamInputBytes = 16 << 10;
// Above that and up to this many rows (a speculative verify, a few requests' decode) a call reads
// each column tile once, in `tile`, its weights prefetched to L2 about kPrefetchBytes ahead: the 4
// weight rows a tile reads side by side are 4 short streams that the hardware prefetchers learn
// too late. weft bench rows (fp32, 4 layers of C 256 and a 50257 head, one thread), ms a pass
// before -> after: M 4 (streamed) 3.8-4.0 -> 2.9-3.2, M 9 (blocks of 2 tiles) 8.1-8.8 -> 3.8-4.0,
// M 16 10.3-11.6 -> 6.7; M 1 2.0-2.3 and M 2 2.1-2.5 stream. At 2 rows the tile took 3.3-4.1.
constexpr int64_t kFewRows = 16;
constexpr int64_t kPrefetchBytes = 32 << 10;
// Past kFewRows and up to this many rows (a step of 16 decodes and a prompt chunk, the first
// requests of a wave of prompts) the rows go in blocks of tiles like many rows, but in groups of
// as many rows each (20: 5 + 5 + 5 + 5, not 6 + 6 + 6 + 2), and every group asks for its share of
// the next block's weights into L2: the block's first group had read them from memory one tile
// ahead, with too little arithmetic on each weight to hide that. Chunks are those of few rows.
// weft bench rows, the 135M model's products, old and new alternated 3-4 times, ms a pass:
// bf16 M 17 18.8-19.1 -> 12.9-13.2, 24 22.9-24.8 -> 17.8-18.1, 32 27.4-27.8 -> 23.9-24.2, 40
// 32.6-33.8 -> 29.0-29.7, 48 38.0-40.3 -> 34.2-40.3; fp32 M 17 34.3-36.1 -> 24.4-25.0, 32
// 53.9-55.5 -> 43.9-45.7, 48 73.4-87.7 -> 64.9-72.3. Past 48 rows the same spread was no faster
// (64: 45.8-53.2 against 48.5-48.6) and the product is compute-bound: the blocks as before.
constexpr int64_t kMidRows = 48;
// fp32 takes them from 15 rows, where few rows' tile-by-tile loop (every row of the input read
// again for each tile) no longer keeps the input in L1: 15 rows of K 576 are 34.6 KB. weft bench
// rows --dtype fp32, the 135M model's products, 4 alternations, ms a pass: M 16 25.1-27.6 ->
// 23.9-24.5, 15 24.2-25.3 -> 23.5-24.6; M 14 and 13 no better (22.7-25.1 against 23.3-24.2,
// 22.5-22.7 against 22.6-25.0). 16 clients through the server, fp32, 4 pairs: 460-481 (mean 471)
// -> 467-500 (480) tokens/s, TPOT 32.2 -> 31.4 ms (mean). bf16's input is half as wide, and its
// 16 rows took 1.06x as long this way.
constexpr int64_t kFp32BlockRows = 15;
// A packed weight (bf16) is one stream a tile, which the prefetchers follow: up to 4 rows a
// software prefetch only takes load slots from it, and past that, with the arithmetic on each
// weight longer, a fetch 2 tiles ahead keeps memory busy. weft bench rows, bf16, share of the
// memory bandwidth, 3 alternated runs each: at M 4 prefetching 0 / 2 / 7 tiles ahead 92% / 65-88%
// / 61-86%, at M 8 60% / 73-79% / 41-69%, at M 12 29-45% / 57-61% / 33-55%.
constexpr int64_t kPackedUnfetchedRows = 4;
constexpr int64_t kPackedFetchTiles = 2;
// From this many rows the tile after the current one is also asked from L2 into L1. weft bench
// rows --dtype bf16, previous binary and this alternated 4 times: M 16 12.72 -> 12.43 ms a pass,
// M 12 10.12 -> 9.87 (faster in every turn; most of it in down's products, whose 16 input rows
// fill L1), but M 5 and 8 2-3% slower (less arithmetic on each weight, the prefetches take its
// load slots). A scratch harness, 16 rows: into L1 alone one tile ahead 1.39x slower; into L2 at
// 4 or 8 tiles instead of 2, 1.00x and 1.06x.
constexpr int64_t kPackedNextToL1Rows = 12;
// From this many bytes of weights a tile, few rows in several groups spread the fetches of a
// later tile over all the groups rather than the first: a first group asking for a whole tile of
// 12 KB (K 1536 in bf16, a 135M model's down) in a third of the tile's time asks faster than one
// core's misses drain. The 135M model's products at 16 rows, bf16, alternated: down 3.03-3.33 ms
// a pass of its 30 -> 2.74-2.87; K 576 (4.6 KB a tile) gained nothing. In fp32 (9.2 KB a tile at
// K 576) every product gained, fetching kSpreadFetchTiles ahead into L2 (the row-major path had
// fetched 32 KB ahead, the next tile into L1 at K 1536): a pass of the model's products
// (fused as the model runs them) at 16 rows 30.7-32.6 -> 25.2-26.5 ms, 12 rows 24.3-24.5 ->
// 20.1-20.3, 8 rows 17.1-17.2 -> 16.0-16.1; 4 tiles ahead did no better, the next tile worse.
constexpr int64_t kSpreadFetchBytes = 8 << 10;
constexpr int64_t kSpreadFetchTiles = 2;
// Below this many multiply-adds one thread computes the whole product: waking a team costs more.
constexpr int64_t kMinParallel = int64_t(1) << 16;

float dot_portable(const float* x, const float* w, int64_t K) {
    float p[kLanes] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kLanes)
        for (int l = 0; l < kLanes; ++l) {
            // Past K the vector path multiplies masked zeros: fma(0, 0, p) == p.
            const int64_t k = k0 + l;
            if (k < K) p[l] = std::fma(x[k], w[k], p[l]);
        }
    return detail::fold16(p);
}

// w: column n of a packed bf16 weight (RowWeightsBf16), whose k-th value is at k % S + (k - k % S)
// · C (C columns a tile, S values a step).
float dot_portable(const uint16_t* x, const uint16_t* w, int64_t K) {
    constexpr int64_t C = RowWeightsBf16::kPackCols, S = RowWeightsBf16::kPackK;
    static_assert(S == 2 * kLanes);
    float p[kLanes] = {};
    for (int64_t k0 = 0; k0 < K; k0 += S) {
        const uint16_t* ws = w + k0 * C - k0;  // ws[k] for k in this step
        for (int l = 0; l < kLanes; ++l) {
            const int64_t even = k0 + 2 * l, odd = even + 1;
            // A product of two bf16 is exact in fp32: an fma and a multiply then an add agree.
            if (odd < K) p[l] += bf16_to_fp32(x[odd]) * bf16_to_fp32(ws[odd]);
            if (even < K) p[l] += bf16_to_fp32(x[even]) * bf16_to_fp32(ws[even]);
        }
    }
    return detail::fold16(p);
}

// Where column n's weights start: row-major fp32, or packed bf16 (RowWeightsBf16).
const float* column_at(const float* w, int64_t n, int64_t K) {
    return w + n * K;
}
const uint16_t* column_at(const uint16_t* w, int64_t n, int64_t K) {
    constexpr int64_t C = RowWeightsBf16::kPackCols, S = RowWeightsBf16::kPackK;
    return w + n / C * C * ((K + S - 1) / S * S) + n % C * S;
}

template <typename T>
void rows_portable(float* out, const T* x, const T* w, const float* bias, int64_t M, int64_t K,
                   int64_t N) {
    omp_for(M * N * K >= kMinParallel, N, [&](int64_t n) {
        for (int64_t m = 0; m < M; ++m) {
            const float s = dot_portable(x + m * K, column_at(w, n, K), K);
            out[m * N + n] = bias ? s + bias[n] : s;
        }
    });
}

#if defined(__AVX512F__)
struct F32 {
    using T = float;
    using V = __m512;
    static constexpr int kStep = kLanes;
    // Row-major, read in place: a tile's weight rows one after the other, K apart.
    static constexpr bool kPacked = false;
    static const T* tile_at(const T* w, int64_t j, int64_t K) { return w + j * kTileCols * K; }
    static const T* column(const T* tw, int c, int64_t K) { return tw + c * K; }
    static int64_t offset(int64_t k) { return k; }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static V load(const float* p, int64_t rest) {
        return _mm512_maskz_loadu_ps(__mmask16((1u << rest) - 1), p);
    }
    static __m512 madd(__m512 acc, V x, V w) { return _mm512_fmadd_ps(x, w, acc); }
};

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
struct Bf16 {
    using T = uint16_t;
    using V = __m512i;
    static constexpr int kStep = 2 * kLanes;
    // Packed (RowWeightsBf16): a tile one run, each step of K its columns' kStep values in turn.
    static_assert(kStep == RowWeightsBf16::kPackK && kTileCols == RowWeightsBf16::kPackCols);
    static constexpr bool kPacked = true;
    static int64_t padded(int64_t K) { return (K + kStep - 1) / kStep * kStep; }
    static const T* tile_at(const T* w, int64_t j, int64_t K) {
        return w + j * kTileCols * padded(K);
    }
    static const T* column(const T* tw, int c, int64_t) { return tw + c * kStep; }
    static int64_t offset(int64_t k) { return k * kTileCols; }
    static V load(const uint16_t* p) { return _mm512_loadu_si512(p); }
    static V load(const uint16_t* p, int64_t rest) {
        return _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << rest) - 1), p);
    }
    static __m512 madd(__m512 acc, V x, V w) {
        return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
    }
};
#endif

// A tile's sums folded (four columns per tree), the bias added, the `cols` real columns stored.
template <int R>
[[gnu::always_inline]] inline void store_tile(float* out, int64_t N,
                                              const __m512 (&acc)[R][kTileCols], const float* bias,
                                              int cols) {
    const __mmask8 keep = __mmask8((1u << cols) - 1);
    const __m128 b = bias ? _mm_maskz_loadu_ps(keep, bias) : _mm_setzero_ps();
    for (int r = 0; r < R; ++r) {
        __m128 s = detail::reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        if (bias) s = _mm_add_ps(s, b);
        _mm_mask_storeu_ps(out + r * N, keep, s);
    }
}

// R rows x 4 columns of out, from R input rows (stride K) and `cols` <= 4 weight rows. Missing
// columns repeat the first (their sums are not stored), so every element takes the same path; a
// packed weight's are its zero padding.
// With Fetch, the prefetches go out at every step; with Spread too, only at the steps whose index
// is fetch_phase modulo fetch_every: the tile's rows of input run in several groups that each ask
// for their part (few_tiles).
template <class Op, int R, bool Tail, bool Fetch, bool NextToL1 = false, bool Spread = false>
[[gnu::always_inline]] inline void tile(float* out, int64_t N, const typename Op::T* x,
                                        const typename Op::T* w, const float* bias, int64_t K,
                                        int cols, int64_t fetch_ahead, int fetch_every = 1,
                                        int fetch_phase = 0) {
    const typename Op::T* wr[kTileCols];
    for (int c = 0; c < kTileCols; ++c) wr[c] = Op::column(w, c < cols ? c : 0, K);
    // The next tile's weights start where this one's would, a tile later.
    const int64_t tile_elems = Op::tile_at(w, 1, K) - w;
    // A packed tile's step is kTileCols vectors in a row, loaded at fixed offsets from one
    // pointer that walks the tile: indexed loads (base + k * scale, one base a column) ran its
    // compute-bound products (M 64-512) 20-25% slower than the row-major weights they replaced.
    const typename Op::T* wk = w;
    __m512 acc[R][kTileCols];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < kTileCols; ++c) acc[r][c] = _mm512_setzero_ps();
    int fetch_turn = fetch_phase;  // fetches at the steps where it is 0
    auto step = [&](int64_t k, auto... rest) {
        typename Op::V wv[kTileCols];
        for (int c = 0; c < kTileCols; ++c)
            if constexpr (Op::kPacked)
                wv[c] = Op::load(wk + c * Op::kStep, rest...);
            else
                wv[c] = Op::load(wr[c] + k, rest...);
        // A later tile's weights (4 rows each, contiguous), `fetch_ahead` tiles on: read from
        // memory while the tiles before it compute, into L1 when it is the next one, else into
        // L2; with NextToL1 the next tile also from L2 into L1 (kPackedNextToL1Rows). 0: none
        // (the rows after a block's first find its weights in cache). A prefetch past the end is
        // harmless.
        const bool fetch = Fetch && (!Spread || fetch_turn == 0);
        if (Spread && --fetch_turn < 0) fetch_turn = fetch_every - 1;
        for (int c = 0; c < kTileCols && fetch; ++c) {
            const typename Op::T* at = Op::kPacked ? wk + c * Op::kStep : wr[c] + k;
            const char* ahead = reinterpret_cast<const char*>(at + fetch_ahead * tile_elems);
            if (fetch_ahead == 1)
                _mm_prefetch(ahead, _MM_HINT_T0);
            else if (fetch_ahead > 1)
                _mm_prefetch(ahead, _MM_HINT_T1);
            if constexpr (NextToL1)
                _mm_prefetch(reinterpret_cast<const char*>(at + tile_elems), _MM_HINT_T0);
        }
        for (int r = 0; r < R; ++r) {
            typename Op::V xv = Op::load(x + r * K + k, rest...);
            // In a register: folded into each multiply-add as a memory operand (GCC's choice),
            // it is loaded 4 times, and the loads, not the multiply-adds, set the pace.
            asm("" : "+v"(xv));
            for (int c = 0; c < kTileCols; ++c) acc[r][c] = Op::madd(acc[r][c], xv, wv[c]);
        }
        if constexpr (Op::kPacked) wk += kTileCols * Op::kStep;
    };
    int64_t k = 0;
    for (; k + Op::kStep <= K; k += Op::kStep) step(k);
    if constexpr (Tail)
        if (k < K) step(k, K - k);
    store_tile<R>(out, N, acc, bias, cols);
}

// One or two rows: R rows x 4 columns, a column at a time, its weight row read front to back and
// each weight vector loaded once for all R rows. The tile's weights are one stream in the order
// they lie, which the prefetchers follow (rows side by side, as `tile` reads them, are 4 short
// streams they learn too late: 2 side by side already cost about 2x the CPU time here); the R
// chains of a column, and the next column's, overlap out of order.
template <class Op, int R>
[[gnu::always_inline]] inline void stream_tile(float* out, int64_t N, const typename Op::T* x,
                                               const typename Op::T* w, const float* bias,
                                               int64_t K, int cols) {
    __m512 acc[R][kTileCols];
    for (int c = 0; c < kTileCols; ++c) {
        const typename Op::T* wc = Op::column(w, c < cols ? c : 0, K);
        __m512 a[R];
        for (int r = 0; r < R; ++r) a[r] = _mm512_setzero_ps();
        auto step = [&](int64_t k, auto... rest) {
            const typename Op::V wv = Op::load(wc + Op::offset(k), rest...);
            for (int r = 0; r < R; ++r) a[r] = Op::madd(a[r], Op::load(x + r * K + k, rest...), wv);
        };
        int64_t k = 0;
        for (; k + Op::kStep <= K; k += Op::kStep) step(k);
        if (k < K) step(k, K - k);
        for (int r = 0; r < R; ++r) acc[r][c] = a[r];
    }
    store_tile<R>(out, N, acc, bias, cols);
}

// f(std::integral_constant<int, rows>) for rows in 1..Max: a register tile of that many rows.
template <int Max, class F>
void with_rows(int rows, F&& f) {
    if constexpr (Max > 1)
        if (rows < Max) return with_rows<Max - 1>(rows, f);
    f(std::integral_constant<int, Max>{});
}

// Column tiles j0..j1 - 1 of `rows` rows (out, x at their first), each by `tile`, whose variant
// is chosen once for them all: chosen for each tile, the choice cost 5-10% of a few-row pass.
template <class Op, int R, bool Tail, bool Fetch, bool Spread = false>
void tiles(float* out, int64_t N, const typename Op::T* x, const typename Op::T* w,
           const float* bias, int64_t K, int64_t j0, int64_t j1, int64_t fetch_ahead,
           int fetch_every = 1, int fetch_phase = 0) {
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t n = j * kTileCols;
        tile<Op, R, Tail, Fetch, false, Spread>(
            out + n, N, x, Op::tile_at(w, j, K), bias ? bias + n : nullptr, K,
            int(std::min<int64_t>(kTileCols, N - n)), fetch_ahead, fetch_every, fetch_phase);
    }
}

// few_tiles' loop when its tiles are large (kSpreadFetchBytes): every group of rows fetches ahead,
// at its share of the steps.
template <class Op, int Last, bool Tail, bool NextToL1>
void few_tiles_spread(float* out, int64_t N, const typename Op::T* x, const typename Op::T* w,
                      const float* bias, int64_t K, int64_t M, int64_t j0, int64_t j1,
                      int64_t fetch_ahead) {
    const int groups = int((M + kTileRows - 1) / kTileRows);
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t n = j * kTileCols;
        const typename Op::T* tw = Op::tile_at(w, j, K);
        const float* b = bias ? bias + n : nullptr;
        const int cols = int(std::min<int64_t>(kTileCols, N - n));
        int64_t m = 0;
        int g = 0;
        for (; m + kTileRows < M; m += kTileRows, ++g)
            tile<Op, kTileRows, Tail, true, NextToL1, true>(out + m * N + n, N, x + m * K, tw, b, K,
                                                            cols, fetch_ahead, groups, g);
        tile<Op, Last, Tail, true, NextToL1, true>(out + m * N + n, N, x + m * K, tw, b, K, cols,
                                                   fetch_ahead, groups, g);
    }
}

// Few rows (M <= kFewRows, more than kTileRows): tile by tile, all M rows of a tile in groups of
// kTileRows, the last of Last rows, before the next tile; the first group fetches ahead, or with
// `spread` (rows_avx512's) every group its share (few_tiles_spread).
template <class Op, int Last, bool Tail, bool Fetch>
void few_tiles(float* out, int64_t N, const typename Op::T* x, const typename Op::T* w,
               const float* bias, int64_t K, int64_t M, int64_t j0, int64_t j1, int64_t fetch_ahead,
               bool spread) {
    const bool next_to_l1 = Op::kPacked && fetch_ahead > 1 && M >= kPackedNextToL1Rows;
    if (Fetch && spread) {
        if (next_to_l1)
            few_tiles_spread<Op, Last, Tail, true>(out, N, x, w, bias, K, M, j0, j1, fetch_ahead);
        else
            few_tiles_spread<Op, Last, Tail, false>(out, N, x, w, bias, K, M, j0, j1, fetch_ahead);
        return;
    }
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t n = j * kTileCols;
        const typename Op::T* tw = Op::tile_at(w, j, K);
        const float* b = bias ? bias + n : nullptr;
        const int cols = int(std::min<int64_t>(kTileCols, N - n));
        if (Fetch && next_to_l1)
            tile<Op, kTileRows, Tail, Fetch, true>(out + n, N, x, tw, b, K, cols, fetch_ahead);
        else
            tile<Op, kTileRows, Tail, Fetch>(out + n, N, x, tw, b, K, cols, fetch_ahead);
        int64_t m = kTileRows;
        for (; m + kTileRows < M; m += kTileRows)
            tile<Op, kTileRows, Tail, false>(out + m * N + n, N, x + m * K, tw, b, K, cols, 0);
        tile<Op, Last, Tail, false>(out + m * N + n, N, x + m * K, tw, b, K, cols, 0);
    }
}

// tiles() and few_tiles() in the variant of `tile` that K and the prefetch distance ask: without
// the masked step when K is whole steps (its masks cost registers for the accumulators), without
// prefetch code when none is asked. With Spread (kMidRows), the rows are group `fetch_phase` of
// `fetch_every`, which asks for its share of the tiles `fetch_ahead` on.
template <class Op, bool Spread = false>
void tile_run(int rows, float* out, int64_t N, const typename Op::T* x, const typename Op::T* w,
              const float* bias, int64_t K, int64_t j0, int64_t j1, int64_t fetch_ahead,
              int fetch_every = 1, int fetch_phase = 0) {
    with_rows<kTileRows>(rows, [&](auto r) {
        constexpr int R = decltype(r)::value;
        if (K % Op::kStep == 0 && fetch_ahead == 0)
            tiles<Op, R, false, false, Spread>(out, N, x, w, bias, K, j0, j1, fetch_ahead,
                                               fetch_every, fetch_phase);
        else if (K % Op::kStep == 0)
            tiles<Op, R, false, true, Spread>(out, N, x, w, bias, K, j0, j1, fetch_ahead,
                                              fetch_every, fetch_phase);
        else
            tiles<Op, R, true, true, Spread>(out, N, x, w, bias, K, j0, j1, fetch_ahead,
                                             fetch_every, fetch_phase);
    });
}

template <class Op>
void few_run(int64_t M, float* out, int64_t N, const typename Op::T* x, const typename Op::T* w,
             const float* bias, int64_t K, int64_t j0, int64_t j1, int64_t fetch_ahead,
             bool spread) {
    const int last = int(M - (M - 1) / kTileRows * kTileRows);
    with_rows<kTileRows>(last, [&](auto r) {
        constexpr int L = decltype(r)::value;
        if (K % Op::kStep == 0 && fetch_ahead == 0)
            few_tiles<Op, L, false, false>(out, N, x, w, bias, K, M, j0, j1, fetch_ahead, spread);
        else if (K % Op::kStep == 0)
            few_tiles<Op, L, false, true>(out, N, x, w, bias, K, M, j0, j1, fetch_ahead, spread);
        else
            few_tiles<Op, L, true, true>(out, N, x, w, bias, K, M, j0, j1, fetch_ahead, spread);
    });
}

// The input of a few-row product that threads share, as the other threads read it: through
// hand_over, so that the caller, rewriting it for the next product, does not wait on their stale
// copies (hand_over.hpp); the caller reads its own, still in its cache. 16 rows over the 135M
// model's shapes in bf16, the two threads on two core complexes: 16.5 -> 14.2-15.0 ms a pass;
// on one complex no change. Many rows read their input many times over, from cache: there it
// would only add a copy.
template <class T>
const T* shared_input(const T* x, int64_t M, int64_t K, bool parallel) {
    if (!parallel || M < 2 || M > kFewRows || omp_get_max_threads() < 2) return x;
    return static_cast<const T*>(hand_over(x, M * K * int64_t(sizeof(T))));
}

// Threads take chunks of column tiles as they come (a thread the OS holds back leaves its
// share to the others: static halves on this shared host took 5-50x longer at M = 1); an element
// is computed whole by one thread, whichever it is.
//
// glu > 0 (matmul_rows_swiglu): the weight's rows are [gate (glu) | up (glu)], N = 2 glu, and out
// is [M, glu], silu(gate) · up. A chunk then takes the same tiles of both halves, into its
// thread's own scratch, and applies SwiGLU to the columns it has just computed: the 2 glu outputs
// a row never cross between threads, and SwiGLU runs on every thread.
template <class Op>
void rows_avx512(float* out, const typename Op::T* x_own, const typename Op::T* w,
                 const float* bias, int64_t M, int64_t K, int64_t N, int64_t glu = 0) {
    // The tiles that chunks split: of one half when the halves are paired.
    const int64_t tiles = glu ? glu / kTileCols : (N + kTileCols - 1) / kTileCols;
    // The first row tile of a block reads its weights from memory, the others from cache: a
    // small block keeps that read close to the arithmetic on it, a large one reads the input rows
    // from L1 more often. Few rows take blocks of one tile and prefetch far ahead (kFewRows).
    // Blocks of tiles in even groups (kMidRows), from kFp32BlockRows rows in fp32.
    const bool mid = M <= kMidRows && M >= (Op::kPacked ? kFewRows + 1 : kFp32BlockRows);
    const bool few = M <= kFewRows && !mid;
    const int64_t block_tiles = few ? 1 : std::clamp<int64_t>(M / kTileCols, 1, kBlockTiles);
    const int64_t tile_bytes = kTileCols * K * int64_t(sizeof(typename Op::T));
    const int64_t fetch_ahead = !few          ? 1
                                : Op::kPacked ? (M <= kPackedUnfetchedRows ? 0 : kPackedFetchTiles)
                                              : std::max<int64_t>(1, kPrefetchBytes / tile_bytes);
    // Either path computes an element in the one order: the choice by M changes no bits.
    // A packed weight's tile is one stream already: `tile` reads it in order at any M.
    const bool stream =
        !Op::kPacked && (M == 1 || (M <= kStreamRows &&
                                    M * K * int64_t(sizeof(typename Op::T)) <= kStreamInputBytes));
    const bool one_stream = Op::kPacked ? M <= kStreamRows : stream;
    // About 8 chunks a thread, long enough to stream (up to 256 weight rows). A streamed chunk
    // costs its bytes plus a claim and a new stream for the prefetchers to pick up: chunks of
    // about 4 a thread of an fp32 weight's bytes, as many bytes in bf16 (2 a thread). With 8 a
    // thread in either dtype, bf16's M = 1 passes read at 80-85% of fp32's GB/s when this host's
    // memory gave 45-50 GB/s; now at fp32's (docs/serving.md, "One row in bf16"). A packed
    // weight's one row (bf16 decode) goes further, one chunk a thread up to the byte cap: in the
    // host's fast windows (55-59 GB/s) a decode step's products then take about 3% less time,
    // fp32's gain nothing (docs/serving.md, "One chunk a thread"). A few rows (a verify, a few
    // requests' decode) take 2 chunks a thread, not 8: a chunk's first tiles wait on memory, and
    // in the fast windows 16 rows over the 135M model's shapes took 0.80x the time in bf16 and
    // 0.96x in fp32, about 0.92x in the slow ones; 4 rows about the same (docs/serving.md, "Few
    // rows in few chunks"); so do up to kMidRows rows (M 32 in bf16: 25.7 -> 23.4 ms a pass).
    const int64_t widen = Op::kPacked && M == 1 ? 8
                          : one_stream ? 2 * int64_t(sizeof(float) / sizeof(typename Op::T))
                          : few || mid ? 4
                                       : 1;
    const int64_t chunk_tiles = std::clamp<int64_t>(widen * tiles / (8 * omp_get_max_threads()), 1,
                                                    widen * 4 * kBlockTiles);
    const int64_t chunks = (tiles + chunk_tiles - 1) / chunk_tiles;
    const bool parallel = M * N * K >= kMinParallel && chunks > 1;
    // Few rows in several groups over large tiles (a packed tile's bytes with its K padded): each
    // group fetches its share of a later tile (kSpreadFetchBytes), in either path.
    const int groups = int((M + kTileRows - 1) / kTileRows);
    // Rows of group g, which starts at row m: groups of kTileRows, the last of what is left; or
    // (kMidRows) as many rows each, the first ones a row more.
    auto group_rows = [&](int64_t g, int64_t m) {
        return int(mid ? M / groups + (g < M % groups) : std::min<int64_t>(kTileRows, M - m));
    };
    const bool spread =
        few && groups > 1 &&
        (Op::tile_at(w, 1, K) - w) * int64_t(sizeof(typename Op::T)) >= kSpreadFetchBytes;
    const typename Op::T* const x_others = shared_input(x_own, M, K, parallel);
    const std::thread::id caller = std::this_thread::get_id();
    // Column tiles [lo, hi) into `to` (ld N): whichever thread runs them, the same tiles in the
    // same order.
    auto run_tiles = [&](const typename Op::T* x, int64_t lo, int64_t hi, float* to) {
        if (stream) {
            for (int64_t j = lo; j < hi; ++j) {
                const int64_t n = j * kTileCols;
                with_rows<kStreamRows>(int(M), [&](auto r) {
                    stream_tile<Op, decltype(r)::value>(to + n, N, x, Op::tile_at(w, j, K),
                                                        bias ? bias + n : nullptr, K,
                                                        int(std::min<int64_t>(kTileCols, N - n)));
                });
            }
            return;
        }
        if constexpr (!Op::kPacked) {
            // Row-major fp32: the variant chosen for each tile (run as tile_run, M 16 and 64 took
            // 3-5% longer, no register spilled; cause not found).
            for (int64_t block = lo; block < hi; block += block_tiles) {
                const int64_t block_end = std::min(hi, block + block_tiles);
                for (int64_t g = 0, m = 0; g < groups; ++g) {
                    const int rows = group_rows(g, m);
                    for (int64_t j = block; j < block_end; ++j) {
                        const int64_t n = j * kTileCols;
                        if (spread || mid) {
                            with_rows<kTileRows>(rows, [&](auto r) {
                                tile<Op, decltype(r)::value, true, true, false, true>(
                                    to + m * N + n, N, x + m * K, Op::tile_at(w, j, K),
                                    bias ? bias + n : nullptr, K,
                                    int(std::min<int64_t>(kTileCols, N - n)),
                                    mid ? block_tiles : kSpreadFetchTiles, groups, int(g));
                            });
                            continue;
                        }
                        with_rows<kTileRows>(rows, [&](auto r) {
                            tile<Op, decltype(r)::value, true, true>(
                                to + m * N + n, N, x + m * K, Op::tile_at(w, j, K),
                                bias ? bias + n : nullptr, K,
                                int(std::min<int64_t>(kTileCols, N - n)), m == 0 ? fetch_ahead : 0);
                        });
                    }
                    m += rows;
                }
            }
            return;
        }
        // Packed bf16: the tile loop inside one choice of variant, which chosen for each tile
        // cost about 10% of a one-row pass (4 KB a tile).
        if (M <= kTileRows) {
            tile_run<Op>(int(M), to, N, x, w, bias, K, lo, hi, fetch_ahead);
            return;
        }
        if (few) {
            few_run<Op>(M, to, N, x, w, bias, K, lo, hi, fetch_ahead, spread);
            return;
        }
        for (int64_t block = lo; block < hi; block += block_tiles) {
            const int64_t block_end = std::min(hi, block + block_tiles);
            for (int64_t g = 0, m = 0; g < groups; ++g) {
                const int rows = group_rows(g, m);
                if (mid)
                    tile_run<Op, true>(rows, to + m * N, N, x + m * K, w, bias, K, block, block_end,
                                       block_tiles, groups, int(g));
                else
                    tile_run<Op>(rows, to + m * N, N, x + m * K, w, bias, K, block, block_end,
                                 m == 0 ? fetch_ahead : 0);
                m += rows;
            }
        }
    };
    auto run_chunk = [&](int64_t chunk) {
        const int64_t lo = chunk * chunk_tiles, hi = std::min(tiles, lo + chunk_tiles);
        // The same bits either way.
        const typename Op::T* x = std::this_thread::get_id() == caller ? x_own : x_others;
        if (!glu) return run_tiles(x, lo, hi, out);
        // Kept by the thread: no other reads it, and its lines stay in this core's cache.
        thread_local std::vector<float> halves;
        if (halves.size() < std::size_t(M * N)) halves.resize(std::size_t(M * N));
        run_tiles(x, lo, hi, halves.data());
        run_tiles(x, tiles + lo, tiles + hi, halves.data());
        swiglu_forward_cols(out, glu, halves.data(), N, M, glu, lo * kTileCols, hi * kTileCols);
    };
    // Up to kFewRows rows (decode, a verify, a few requests' step) the chunks go through the team
    // that stays up between products (chunk_team.hpp), not a parallel region per product:
    // serving's steps run attention on the team too, and a product's libgomp thread beside it is
    // a second pool spinning on two cores (and, under `weft serve`'s short GOMP_SPINCOUNT, asleep
    // after each gap longer than a few us). At one row from the start; at 2-16 rows since 16
    // clients through the server gained 4-6% (docs/serving.md, "One team for a step's products").
    // Many rows stay in OpenMP: their input's rounding is an OpenMP region, and under libgomp's
    // default spin its thread then held the core the team's needed (bf16, 64 rows: 1.75x).
    if (parallel && M <= kFewRows && team_for(chunks, run_chunk)) return;
    // Not `omp parallel if`: a region even of one thread costs a futex call (omp_for.hpp).
    if (!parallel) {
        for (int64_t chunk = 0; chunk < chunks; ++chunk) run_chunk(chunk);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) run_chunk(chunk);
}
#endif

void check_shape(const char* what, int64_t M, int64_t K, int64_t N) {
    WEFT_CHECK(M >= 0 && K >= 0 && N >= 0, "{}: M={} K={} N={}, expected non-negative sizes", what,
               M, K, N);
}

}  // namespace

void matmul_rows(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                 int64_t K, int64_t N) {
    check_shape("matmul_rows", M, K, N);
#if defined(__AVX512F__)
    if (use_avx512()) return rows_avx512<F32>(out, inp, weight, bias, M, K, N);
#endif
    rows_portable(out, inp, weight, bias, M, K, N);
}

namespace {

// Whether rows_avx512 pairs the halves (glu): a chunk takes whole tiles of each, and few rows
// (decode, a verify), whose products hand their outputs between threads every few microseconds.
// More rows (a prompt chunk) spend far longer on each product than on its hand-off, and each
// thread's scratch would hold all their rows.
bool pairs_halves(int64_t M, int64_t F) {
    return F % kTileCols == 0 && M <= kFewRows;
}

// The unfused order's bits: the product, then SwiGLU on each row (as Model::forward_rows did).
template <class Product>
void product_then_swiglu(float* out, int64_t M, int64_t F, Product product) {
    std::vector<float> gu(std::size_t(M * 2 * F));
    product(gu.data());
    for (int64_t m = 0; m < M; ++m) swiglu_forward(out + m * F, gu.data() + m * 2 * F, 1, F);
}

}  // namespace

void matmul_rows_swiglu(float* out, const float* inp, const float* weight, int64_t M, int64_t K,
                        int64_t F) {
    check_shape("matmul_rows_swiglu", M, K, 2 * F);
#if defined(__AVX512F__)
    if (use_avx512() && pairs_halves(M, F))
        return rows_avx512<F32>(out, inp, weight, nullptr, M, K, 2 * F, F);
#endif
    product_then_swiglu(out, M, F,
                        [&](float* gu) { matmul_rows(gu, inp, weight, nullptr, M, K, 2 * F); });
}

namespace {

// The weight rounded to bf16 (row-major), then laid out as RowWeightsBf16 packs it into `to`.
void pack_bf16(uint16_t* to, const float* weight, int64_t N, int64_t K) {
    constexpr int64_t C = RowWeightsBf16::kPackCols, S = RowWeightsBf16::kPackK;
    std::vector<uint16_t> rounded(std::size_t(N * K));
    convert_fp32_to_bf16(rounded.data(), weight, N, K, K);
    const int64_t steps = (K + S - 1) / S;
    std::fill_n(to, RowWeightsBf16::packed_size(N, K), uint16_t(0));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < steps; ++s)
            std::copy_n(rounded.data() + n * K + s * S, std::min(S, K - s * S),
                        to + ((n / C * steps + s) * C + n % C) * S);
}

}  // namespace

int64_t RowWeightsBf16::packed_size(int64_t n, int64_t k) {
    return (n + kPackCols - 1) / kPackCols * kPackCols * ((k + kPackK - 1) / kPackK * kPackK);
}

RowWeightsBf16::RowWeightsBf16(const float* weight, int64_t n, int64_t k)
    : N(n), K(k), own_(std::size_t(packed_size(n, k))) {
    pack_bf16(own_.data(), weight, N, K);
    w = own_;
}

RowWeightsBf16::RowWeightsBf16(const float* weight, int64_t n, int64_t k, HugePageArena& arena)
    : N(n), K(k) {
    const std::size_t size = std::size_t(packed_size(n, k));
    auto* to = static_cast<uint16_t*>(arena.take(size * sizeof(uint16_t)));
    pack_bf16(to, weight, N, K);
    w = {to, size};
}

namespace {

// The input rounded once per call, into this thread's buffer; each row's bits depend only on that
// row.
const uint16_t* rounded_input(const float* inp, int64_t M, int64_t K) {
    thread_local std::vector<uint16_t> x;
    x.resize(std::size_t(M * K));
    convert_fp32_to_bf16(x.data(), inp, M, K, K);
    return x.data();
}

}  // namespace

void matmul_rows_bf16(float* out, const float* inp, const RowWeightsBf16& weight, const float* bias,
                      int64_t M) {
    const int64_t K = weight.K, N = weight.N;
    check_shape("matmul_rows_bf16", M, K, N);
    const uint16_t* x = rounded_input(inp, M, K);
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (lanes::vectors<uint16_t>())
        return rows_avx512<Bf16>(out, x, weight.w.data(), bias, M, K, N);
#endif
    rows_portable(out, x, weight.w.data(), bias, M, K, N);
}

void matmul_rows_bf16_swiglu(float* out, const float* inp, const RowWeightsBf16& weight,
                             int64_t M) {
    const int64_t K = weight.K, F = weight.N / 2;
    check_shape("matmul_rows_bf16_swiglu", M, K, weight.N);
    WEFT_CHECK(weight.N % 2 == 0, "matmul_rows_bf16_swiglu: N={}, expected [gate | up], even",
               weight.N);
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (lanes::vectors<uint16_t>() && pairs_halves(M, F))
        return rows_avx512<Bf16>(out, rounded_input(inp, M, K), weight.w.data(), nullptr, M, K,
                                 2 * F, F);
#endif
    product_then_swiglu(out, M, F,
                        [&](float* gu) { matmul_rows_bf16(gu, inp, weight, nullptr, M); });
}

}  // namespace weft::kernels
