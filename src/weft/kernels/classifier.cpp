#include "weft/kernels/classifier.hpp"

#include "weft/kernels/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>

#include "weft/core/error.hpp"
#include "weft/kernels/exp_nonpositive.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

using detail::exp_nonpositive;

// Rows per chunk. The dwte update is a GEMM with inner dimension = chunk rows, and it only runs
// near peak once that is several hundred (bench_matmul measures it); 1024 rows of GPT-2 logits
// are 206 MB, which a 124M-parameter run can afford.
constexpr int64_t kMaxChunkRows = 1024;

// One row of logits -> its loss; when `grad`, the row becomes scale * (softmax - onehot).
float row_portable(float* row, int64_t V, int32_t target, float scale, bool grad) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < V; ++v) max = std::max(max, row[v]);
    float target_logit = row[target];
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
        float e = exp_nonpositive(row[v] - max);
        if (grad) row[v] = e;
        sum += e;
    }
    if (grad) {
        float k = scale / sum;
        for (int64_t v = 0; v < V; ++v) row[v] *= k;
        row[target] -= scale;
    }
    return std::log(sum) + max - target_logit;
}

#if defined(__AVX512F__)
float row_avx512(float* row, int64_t V, int32_t target, float scale, bool grad) {
    const int64_t full = V / 16 * 16;
    const __mmask16 tail = __mmask16((1u << (V - full)) - 1);
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    // Two accumulators each: the loops are latency-bound on one.
    __m512 m0 = neg_inf, m1 = neg_inf;
    int64_t v = 0;
    for (; v + 32 <= full; v += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + v));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + v + 16));
    }
    for (; v < full; v += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + v));
    m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(neg_inf, tail, row + full));
    const float max = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    const float target_logit = row[target];

    const __m512 vmax = _mm512_set1_ps(max);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (v = 0; v + 32 <= full; v += 32) {
        __m512 e0 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v), vmax));
        __m512 e1 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v + 16), vmax));
        if (grad) {
            _mm512_storeu_ps(row + v, e0);
            _mm512_storeu_ps(row + v + 16, e1);
        }
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; v < full; v += 16) {
        __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v), vmax));
        if (grad) _mm512_storeu_ps(row + v, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (tail) {
        // Masked-off lanes load -inf, and exp(-inf - max) is 0.
        __m512 e =
            exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, row + full), vmax));
        if (grad) _mm512_mask_storeu_ps(row + full, tail, e);
        s0 = _mm512_add_ps(s0, e);
    }
    const float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));

    if (grad) {
        const __m512 k = _mm512_set1_ps(scale / sum);
        for (v = 0; v < full; v += 16)
            _mm512_storeu_ps(row + v, _mm512_mul_ps(_mm512_loadu_ps(row + v), k));
        if (tail)
            _mm512_mask_storeu_ps(row + full, tail,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), k));
        row[target] -= scale;
    }
    return std::log(sum) + max - target_logit;
}
#endif

// The logits block is kept between calls: allocating 200 MB per call would page-fault it in
// again each step. Calls are serialised on it (the kernel uses every core anyway).
struct Scratch {
    std::mutex mutex;
    std::unique_ptr<float[]> data;
    int64_t size = 0;
};

Scratch& scratch() {
    static Scratch s;
    return s;
}

}  // namespace

int64_t classifier_chunk_rows(int64_t N) {
    if (N <= 0) return 0;
    // Equal chunks: a short last chunk would make a poor dwte GEMM.
    int64_t chunks = (N + kMaxChunkRows - 1) / kMaxChunkRows;
    return (N + chunks - 1) / chunks;
}

int64_t classifier_scratch_floats(int64_t N, int64_t V) {
    return classifier_chunk_rows(N) * V;
}

void classifier_forward_backward(float* loss, float* dx, float* dwte, const float* x,
                                 const float* wte, const int32_t* targets, int64_t N, int64_t C,
                                 int64_t V, float scale) {
    WEFT_PROFILE("classifier");
    WEFT_CHECK(N >= 0 && C > 0 && V > 0, "classifier_forward_backward: bad sizes N={} C={} V={}", N,
               C, V);
    for (int64_t n = 0; n < N; ++n)
        WEFT_CHECK(targets[n] < V, "classifier_forward_backward: target {} of row {} is not < V={}",
                   targets[n], n, V);
    if (N == 0) return;
    const bool grad = dx != nullptr || dwte != nullptr;
    const int64_t R = classifier_chunk_rows(N);
    Scratch& s = scratch();
    std::lock_guard lock(s.mutex);
    if (s.size < R * V) {
        s.data.reset();  // release the old block before taking the larger one
        s.data.reset(new float[size_t(R * V)]);
        s.size = R * V;
    }
    float* logits = s.data.get();
    auto row_kernel = row_portable;
#if defined(__AVX512F__)
    if (kernel_isa() == Isa::avx512) row_kernel = row_avx512;
#endif

    for (int64_t n0 = 0; n0 < N; n0 += R) {
        const int64_t r = std::min(R, N - n0);
        const float* xc = x + n0 * C;
        gemm(false, true, r, V, C, 1.0f, xc, C, wte, C, 0.0f, logits, V);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < r; ++i) {
            float* row = logits + i * V;
            const int32_t t = targets[n0 + i];
            float l = 0.0f;
            if (t >= 0)
                l = row_kernel(row, V, t, scale, grad);
            else if (grad)
                std::memset(row, 0, size_t(V) * sizeof(float));  // no gradient from this row
            if (loss) loss[n0 + i] = l;
        }
        if (dx) gemm(false, false, r, C, V, 1.0f, logits, V, wte, C, 0.0f, dx + n0 * C, C);
        if (dwte) gemm(true, false, V, C, r, 1.0f, logits, V, xc, C, 1.0f, dwte, C);
    }
}

void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C,
                       int64_t V) {
    WEFT_CHECK(N >= 0 && C > 0 && V > 0, "classifier_logits: bad sizes N={} C={} V={}", N, C, V);
    gemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, logits, V);
}

}  // namespace weft::kernels
