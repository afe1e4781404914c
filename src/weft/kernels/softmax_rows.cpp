#include "weft/kernels/softmax_rows.hpp"

#include <algorithm>
#include <limits>

#include "weft/kernels/exp_nonpositive.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

void scale_bf16_portable(uint16_t* out, const float* row, int64_t V, float k) {
    for (int64_t v = 0; v < V; ++v) lanes::store(out + v, row[v] * k);
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

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
void scale_bf16_avx512(uint16_t* out, const float* row, int64_t V, float k) {
    const int64_t full = V / 16 * 16;
    const __m512 vk = _mm512_set1_ps(k);
    for (int64_t v = 0; v < full; v += 16)
        lanes::store16(out + v, _mm512_mul_ps(lanes::load16(row + v), vk));
    if (full < V) {
        const __mmask16 tail = lanes::tail_mask(V - full);
        lanes::store16(out + full, _mm512_mul_ps(lanes::load16(row + full, tail), vk), tail);
    }
}
#endif

}  // namespace

SoftmaxRowOps softmax_row_ops() {
    SoftmaxRowOps ops{max_portable, exp_sum_portable, scale_portable, scale_bf16_portable};
#if defined(__AVX512F__)
    if (use_avx512()) ops = {max_avx512, exp_sum_avx512, scale_avx512, scale_bf16_portable};
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (lanes::vectors<uint16_t>()) ops.scale_bf16 = scale_bf16_avx512;
#endif
    return ops;
}

}  // namespace weft::kernels::detail
