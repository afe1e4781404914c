#include "weft/kernels/elementwise.hpp"

#include <algorithm>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

// Elements a thread takes at a time in the streaming kernels (64 KiB of fp32).
constexpr int64_t kBlock = 16384;
// Below this many elements a parallel region costs more than the work it would split.
constexpr int64_t kMinParallel = 1 << 15;
// Channels one thread owns in the dwte scatter: 256 bytes, whole cache lines when rows are
// aligned, so no two threads write the same line.
constexpr int64_t kChannelBlock = 64;

// out[i] = a[i] + b[i] over [0, n); out may alias a or b since every lane is read before written.
void add_range(float* out, const float* a, const float* b, int64_t n, bool vec) {
    int64_t i = 0;
#if defined(__AVX512F__)
    if (vec) {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(out + i,
                             _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
        if (i < n) {
            const __mmask16 k = __mmask16((1u << (n - i)) - 1);
            const __m512 s =
                _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i));
            _mm512_mask_storeu_ps(out + i, k, s);
        }
        return;
    }
#endif
    (void)vec;
    for (; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename F>
void for_blocks(int64_t n, F&& f) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t i = 0; i < blocks; ++i) f(i * kBlock, std::min(n, (i + 1) * kBlock));
}

// A negative id would index before wte; the vocabulary size is not known here, so the upper
// bound is the caller's to check.
void check_tokens(const int32_t* tokens, int64_t count, const char* where) {
    for (int64_t i = 0; i < count; ++i)
        WEFT_CHECK(tokens[i] >= 0, "{}: tokens[{}] = {}, expected a token id >= 0", where, i,
                   tokens[i]);
}

// Eight independent lanes: one running sum would be a dependency chain the compiler may not
// reorder, while lanes need no reassociation and vectorise.
double sum_squares_portable(const float* x, int64_t lo, int64_t hi) {
    double lane[8] = {};
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
        for (int j = 0; j < 8; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
    double tail = 0;
    for (; i < hi; ++i) tail += double(x[i]) * double(x[i]);
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

#if defined(__AVX512F__)
// Not _mm512_reduce_add_pd: its 256-bit extract trips GCC 12's bogus warning (see above).
inline double hsum(__m512d v) {
    v = _mm512_add_pd(v, _mm512_shuffle_f64x2(v, v, 0x4E));
    v = _mm512_add_pd(v, _mm512_shuffle_f64x2(v, v, 0xB1));
    const __m128d x = _mm512_castpd512_pd128(v);
    return _mm_cvtsd_f64(_mm_add_sd(x, _mm_unpackhi_pd(x, x)));
}

// Squares of fp32 values are exact in double, so only the summation order rounds.
double sum_squares_avx512(const float* x, int64_t lo, int64_t hi) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        const __m512d l = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        const __m512d h = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        a0 = _mm512_fmadd_pd(l, l, a0);
        a1 = _mm512_fmadd_pd(h, h, a1);
    }
    double tail = 0;
    for (; i < hi; ++i) tail += double(x[i]) * double(x[i]);
    return hsum(_mm512_add_pd(a0, a1)) + tail;
}
#endif

}  // namespace

void add_forward(float* out, const float* a, const float* b, int64_t n) {
    WEFT_PROFILE("residual_add");
    WEFT_CHECK(n >= 0, "add_forward: n={}, expected n >= 0", n);
    const bool vec = use_avx512();
    for_blocks(n,
               [=](int64_t lo, int64_t hi) { add_range(out + lo, a + lo, b + lo, hi - lo, vec); });
}

void add_inplace(float* out, const float* a, int64_t n) {
    add_forward(out, out, a, n);
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t pos0) {
    WEFT_PROFILE("embedding_fwd");
    WEFT_CHECK(B >= 0 && T >= 0 && C >= 0 && pos0 >= 0,
               "embedding_forward: B={} T={} C={} pos0={}, expected all >= 0", B, T, C, pos0);
    check_tokens(tokens, B * T, "embedding_forward");
    const bool vec = use_avx512();
#pragma omp parallel for schedule(static) if (B * T * C >= kMinParallel)
    for (int64_t bt = 0; bt < B * T; ++bt) {
        const int64_t t = bt % T;
        add_range(out + bt * C, wte + int64_t(tokens[bt]) * C, wpe + (pos0 + t) * C, C, vec);
    }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, int64_t pos0) {
    WEFT_PROFILE("embedding_bwd");
    WEFT_CHECK(B >= 0 && T >= 0 && C >= 0 && pos0 >= 0,
               "embedding_backward: B={} T={} C={} pos0={}, expected all >= 0", B, T, C, pos0);
    const bool vec = use_avx512();
    const bool parallel = B * T * C >= kMinParallel;
    if (dwte) {
        check_tokens(tokens, B * T, "embedding_backward");
        // Repeated tokens make the scatter collide on rows, so threads own channel slices
        // instead: each slice sees every token in order, which is race-free and gives the same
        // sums for any thread count.
        const int64_t slices = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (parallel && slices > 1)
        for (int64_t s = 0; s < slices; ++s) {
            const int64_t c0 = s * kChannelBlock, width = std::min(C, c0 + kChannelBlock) - c0;
            for (int64_t bt = 0; bt < B * T; ++bt) {
                float* row = dwte + int64_t(tokens[bt]) * C + c0;
                add_range(row, row, dout + bt * C + c0, width, vec);
            }
        }
    }
    if (dwpe) {
        // A position owns its row of dwpe; the batch is summed in order.
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t t = 0; t < T; ++t) {
            float* row = dwpe + (pos0 + t) * C;
            for (int64_t b = 0; b < B; ++b) add_range(row, row, dout + (b * T + t) * C, C, vec);
        }
    }
}

void embedding_forward_shard(float* out, const int32_t* tokens, const float* wte_shard,
                             const float* wpe, int64_t B, int64_t T, int64_t C, int64_t v0,
                             int64_t Vs, int64_t pos0) {
    WEFT_PROFILE("embedding_fwd");
    WEFT_CHECK(B >= 0 && T >= 0 && C >= 0 && pos0 >= 0 && v0 >= 0 && Vs >= 0,
               "embedding_forward_shard: B={} T={} C={} v0={} Vs={} pos0={}, expected all >= 0", B,
               T, C, v0, Vs, pos0);
    check_tokens(tokens, B * T, "embedding_forward_shard");
    const bool vec = use_avx512();
    omp_for(B * T * C >= kMinParallel, B * T, [&](int64_t bt) {
        const int64_t t = bt % T, v = int64_t(tokens[bt]) - v0;
        float* row = out + bt * C;
        const bool held = v >= 0 && v < Vs;
        if (held && wpe) {
            add_range(row, wte_shard + v * C, wpe + (pos0 + t) * C, C, vec);
        } else if (held) {
            std::copy_n(wte_shard + v * C, C, row);
        } else if (wpe) {
            std::copy_n(wpe + (pos0 + t) * C, C, row);
        } else {
            std::fill_n(row, C, 0.0f);
        }
    });
}

void embedding_backward_shard(float* dwte_shard, const float* dout, const int32_t* tokens,
                              int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vs) {
    WEFT_PROFILE("embedding_bwd");
    WEFT_CHECK(B >= 0 && T >= 0 && C >= 0 && v0 >= 0 && Vs >= 0,
               "embedding_backward_shard: B={} T={} C={} v0={} Vs={}, expected all >= 0", B, T, C,
               v0, Vs);
    const bool vec = use_avx512();
    // Threads own channel slices, as in embedding_backward: race-free, and the same sums for any
    // thread count.
    const int64_t slices = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (B * T * C >= kMinParallel && slices > 1)
    for (int64_t s = 0; s < slices; ++s) {
        const int64_t c0 = s * kChannelBlock, width = std::min(C, c0 + kChannelBlock) - c0;
        for (int64_t bt = 0; bt < B * T; ++bt) {
            const int64_t v = int64_t(tokens[bt]) - v0;
            if (v < 0 || v >= Vs) continue;
            float* row = dwte_shard + v * C + c0;
            add_range(row, row, dout + bt * C + c0, width, vec);
        }
    }
}

void add_bias_residual(float* out, const float* bias, const float* resid, int64_t N, int64_t C) {
    WEFT_PROFILE("residual_add");
    WEFT_CHECK(N >= 0 && C >= 0, "add_bias_residual: N={} C={}, expected both >= 0", N, C);
    const bool vec = use_avx512();
#pragma omp parallel for schedule(static) if (N * C >= kMinParallel)
    for (int64_t n = 0; n < N; ++n) {
        float* row = out + n * C;
        add_range(row, row, bias, C, vec);
        add_range(row, row, resid + n * C, C, vec);
    }
}

double sum_squares(const float* x, int64_t n) {
    WEFT_PROFILE("grad_norm");
    WEFT_CHECK(n >= 0, "sum_squares: n={}, expected n >= 0", n);
    const bool vec = use_avx512();
    // Fixed-size chunks summed in chunk order: the result does not depend on the thread count.
    constexpr int64_t block = kSumSquaresBlock;
    const int64_t chunks = (n + block - 1) / block;
    std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t i = 0; i < chunks; ++i) {
        const int64_t lo = i * block, hi = std::min(n, lo + block);
#if defined(__AVX512F__)
        if (vec) {
            partial[size_t(i)] = sum_squares_avx512(x, lo, hi);
            continue;
        }
#endif
        partial[size_t(i)] = sum_squares_portable(x, lo, hi);
    }
    (void)vec;
    double total = 0;
    for (double p : partial) total += p;
    return total;
}

}  // namespace weft::kernels
