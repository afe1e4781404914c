#include "weft/kernels/classifier_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/exp_nonpositive.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

using detail::exp_nonpositive;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The row loops of the fused kernel (classifier.cpp), split at the points where the ranks'
// statistics are combined; the same accumulation order, so one rank reproduces it bit for bit.
float max_portable(const float* row, int64_t V) {
    float max = kNegInf;
    for (int64_t v = 0; v < V; ++v) max = std::max(max, row[v]);
    return max;
}

float exp_sum_portable(float* row, int64_t V, float max, bool keep) {
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
        float e = exp_nonpositive(row[v] - max);
        if (keep) row[v] = e;
        sum += e;
    }
    return sum;
}

void scale_portable(float* row, int64_t V, float k) {
    for (int64_t v = 0; v < V; ++v) row[v] *= k;
}

#if defined(__AVX512F__)
float max_avx512(const float* row, int64_t V) {
    const int64_t full = V / 16 * 16;
    const __mmask16 tail = __mmask16((1u << (V - full)) - 1);
    const __m512 neg_inf = _mm512_set1_ps(kNegInf);
    // Two accumulators: the loop is latency-bound on one.
    __m512 m0 = neg_inf, m1 = neg_inf;
    int64_t v = 0;
    for (; v + 32 <= full; v += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + v));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + v + 16));
    }
    for (; v < full; v += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + v));
    m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(neg_inf, tail, row + full));
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

float exp_sum_avx512(float* row, int64_t V, float max, bool keep) {
    const int64_t full = V / 16 * 16;
    const __mmask16 tail = __mmask16((1u << (V - full)) - 1);
    const __m512 neg_inf = _mm512_set1_ps(kNegInf);
    const __m512 vmax = _mm512_set1_ps(max);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t v = 0;
    for (; v + 32 <= full; v += 32) {
        __m512 e0 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v), vmax));
        __m512 e1 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v + 16), vmax));
        if (keep) {
            _mm512_storeu_ps(row + v, e0);
            _mm512_storeu_ps(row + v + 16, e1);
        }
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; v < full; v += 16) {
        __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + v), vmax));
        if (keep) _mm512_storeu_ps(row + v, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (tail) {
        // Masked-off lanes load -inf, and exp(-inf - max) is 0.
        __m512 e =
            exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, row + full), vmax));
        if (keep) _mm512_mask_storeu_ps(row + full, tail, e);
        s0 = _mm512_add_ps(s0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void scale_avx512(float* row, int64_t V, float k) {
    const int64_t full = V / 16 * 16;
    const __mmask16 tail = __mmask16((1u << (V - full)) - 1);
    const __m512 vk = _mm512_set1_ps(k);
    for (int64_t v = 0; v < full; v += 16)
        _mm512_storeu_ps(row + v, _mm512_mul_ps(_mm512_loadu_ps(row + v), vk));
    if (tail)
        _mm512_mask_storeu_ps(row + full, tail,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), vk));
}
#endif

void check_sizes(const char* where, int64_t N, int64_t C, int64_t Vr) {
    WEFT_CHECK(N >= 0 && C > 0 && Vr >= 0, "{}: bad sizes N={} C={} Vr={}", where, N, C, Vr);
}

}  // namespace

void classifier_shard_logits(float* logits, float* row_max, const float* x, const float* wte,
                             int64_t N, int64_t C, int64_t Vr) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_logits", N, C, Vr);
    if (N == 0) return;
    if (Vr == 0) {  // a shard of padding rows only: it takes no part in any row's softmax
        std::fill(row_max, row_max + N, kNegInf);
        return;
    }
    gemm(false, true, N, Vr, C, 1.0f, x, C, wte, C, 0.0f, logits, Vr);
    auto row_max_of = max_portable;
#if defined(__AVX512F__)
    if (use_avx512()) row_max_of = max_avx512;
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) row_max[n] = row_max_of(logits + n * Vr, Vr);
}

void classifier_shard_sums(float* sums, float* logits, const float* row_max, const int32_t* targets,
                           int64_t N, int64_t Vr, int64_t v0, bool keep_exp) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_sums", N, 1, Vr);
    auto exp_sum = exp_sum_portable;
#if defined(__AVX512F__)
    if (use_avx512()) exp_sum = exp_sum_avx512;
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        float* row = logits + n * Vr;
        const int64_t t = targets[n];
        sums[n] = 0.0f;
        sums[N + n] = 0.0f;
        if (t < 0) {
            if (keep_exp) std::fill(row, row + Vr, 0.0f);  // no gradient from this row
            continue;
        }
        // The target's logit is read before keep_exp overwrites it.
        if (t >= v0 && t < v0 + Vr) sums[N + n] = row[t - v0];
        sums[n] = exp_sum(row, Vr, row_max[n], keep_exp);
    }
}

void classifier_shard_finish(float* loss, float* dx, float* dwte, float* logits,
                             const float* row_max, const float* sums, const float* x,
                             const float* wte, const int32_t* targets, int64_t N, int64_t C,
                             int64_t Vr, int64_t v0, float scale) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_finish", N, C, Vr);
    const bool grad = dx != nullptr || dwte != nullptr;
    auto scale_row = scale_portable;
#if defined(__AVX512F__)
    if (use_avx512()) scale_row = scale_avx512;
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n];
        if (t < 0) {
            if (loss) loss[n] = 0.0f;
            continue;
        }
        const float sum = sums[n], max = row_max[n], target_logit = sums[N + n];
        if (loss) loss[n] = std::log(sum) + max - target_logit;
        if (grad) {
            float* row = logits + n * Vr;
            scale_row(row, Vr, scale / sum);
            if (t >= v0 && t < v0 + Vr) row[t - v0] -= scale;
        }
    }
    if (!grad || N == 0) return;
    if (Vr == 0) {
        if (dx) std::fill(dx, dx + N * C, 0.0f);
        return;
    }
    if (dx) gemm(false, false, N, C, Vr, 1.0f, logits, Vr, wte, C, 0.0f, dx, C);
    if (dwte) gemm(true, false, Vr, C, N, 1.0f, logits, Vr, x, C, 1.0f, dwte, C);
}

int64_t classifier_shard_scratch_floats(int64_t N, int64_t Vr) {
    const int64_t R = classifier_chunk_rows(N);
    return R * Vr + 3 * R;
}

}  // namespace weft::kernels
