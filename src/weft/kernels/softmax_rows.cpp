#include "weft/kernels/softmax_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/core/error.hpp"
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

void grad_bf16_transposed_portable(uint16_t* out, int64_t ld, const GradRow* rows, int64_t n,
                                   float scale, int64_t V) {
    for (int64_t v = 0; v < V; ++v)
        for (int64_t i = 0; i < n; ++i) {
            const GradRow& r = rows[i];
            float g = 0.0f;
            if (r.logits) {
                g = exp_nonpositive(r.logits[v] - r.max) * r.k;
                if (v == r.target) g -= scale;
            }
            lanes::store(out + v * ld + i, g);
        }
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
// 16 columns at a time: rows 2p and 2p + 1 rounded into the words of z[p] (bf16 pairs), then
// transposed so that z[j] holds column j's 32 values in row order, one 64-byte store. The
// exponentials are computed again rather than kept by exp_sum: writing them back costs a pass
// of the block through memory, recomputing them costs less.
void grad_bf16_transposed_avx512(uint16_t* out, int64_t ld, const GradRow* rows, int64_t n,
                                 float scale, int64_t V) {
    const __mmask32 keep = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
    // A whole block on whole cache lines is stored with streaming stores: each of its columns is
    // one line the block writes once, that no cache needs to read first; the block's gradient
    // (3.2 MB for GPT-2) leaves the caches to the logits the next block reads.
    const bool stream = n == kTransposedRows && reinterpret_cast<uintptr_t>(out) % 64 == 0 &&
                        (ld * int64_t(sizeof(uint16_t))) % 64 == 0;
    GradRow live[kTransposedRows];
    for (int64_t i = 0; i < std::min(n, kTransposedRows); ++i) live[i] = rows[i];
    const __m512 vscale = _mm512_set1_ps(scale);
    // Each of the 32 rows is read 64 bytes at a time, more streams than the hardware prefetcher
    // follows: prefetched 8 lines ahead, a chunk's block runs 14.2 -> 12.1 ms (one thread).
    constexpr int64_t kAhead = 128;
    for (int64_t v = 0; v < V; v += 16) {
        const int64_t w = std::min<int64_t>(16, V - v);
        const __mmask16 m = lanes::tail_mask(w);
        auto grad = [&](int64_t i) {
            const GradRow& r = live[i];
            if (!r.logits) return _mm512_setzero_ps();
            _mm_prefetch(reinterpret_cast<const char*>(r.logits + v + kAhead), _MM_HINT_T0);
            const __m512 x = _mm512_sub_ps(lanes::load16(r.logits + v, m), _mm512_set1_ps(r.max));
            __m512 g = _mm512_mul_ps(exp_nonpositive(x), _mm512_set1_ps(r.k));
            if (const int64_t at = r.target - v; at >= 0 && at < 16)
                g = _mm512_mask_sub_ps(g, __mmask16(1u << at), g, vscale);
            return g;
        };
        __m512i z[16];
        for (int p = 0; p < 16; ++p) z[p] = lanes::pair_words(grad(2 * p), grad(2 * p + 1));
        lanes::transpose16x16(z);
        if (stream)
            for (int64_t j = 0; j < w; ++j)
                _mm512_stream_si512(reinterpret_cast<__m512i*>(out + (v + j) * ld), z[j]);
        else
            for (int64_t j = 0; j < w; ++j)
                _mm512_mask_storeu_epi16(out + (v + j) * ld, keep, z[j]);
    }
    if (stream) _mm_sfence();  // the streaming stores are seen before the products read them
}
#endif

}  // namespace

SoftmaxRowOps softmax_row_ops() {
    SoftmaxRowOps ops{max_portable, exp_sum_portable, scale_portable,
                      grad_bf16_transposed_portable};
#if defined(__AVX512F__)
    if (use_avx512()) {
        ops.max = max_avx512;
        ops.exp_sum = exp_sum_avx512;
        ops.scale = scale_avx512;
    }
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (lanes::vectors<uint16_t>()) ops.grad_bf16_transposed = grad_bf16_transposed_avx512;
#endif
    return ops;
}

}  // namespace weft::kernels::detail

namespace weft::kernels {

LogSoftmaxRow log_softmax_terms(const float* row, int64_t V) {
    const detail::SoftmaxRowOps ops = detail::softmax_row_ops();
    const float max = ops.max(row, V);
    // Without `keep` exp_sum only reads the row.
    const float sum = ops.exp_sum(const_cast<float*>(row), V, max, false);
    return {max, std::log(sum)};
}

float log_softmax_at(const float* row, int64_t V, int64_t t) {
    return log_softmax_terms(row, V).at(row[t]);
}

void top_indices(const float* row, int64_t V, int64_t n, int32_t* out) {
    WEFT_CHECK(n >= 0 && n <= V, "top_indices: n={} of a row of {}, expected 0 <= n <= V", n, V);
    if (n == 0) return;
    // Kept sorted, best first; `before(a, b)`: a ranks above b. Scanning in increasing index, an
    // element equal to the last kept ranks below it, so a strict compare with the last suffices.
    auto before = [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
    };
    int64_t kept = 0;
    for (int64_t v = 0; v < V; ++v) {
        if (kept == n && !(row[v] > row[out[n - 1]])) continue;
        int64_t at = kept < n ? kept++ : n - 1;
        for (; at > 0 && before(int32_t(v), out[at - 1]); --at) out[at] = out[at - 1];
        out[at] = int32_t(v);
    }
}

int64_t argmax(const float* row, int64_t V) {
    const float max = detail::softmax_row_ops().max(row, V);
    int64_t v = 0;
#if defined(__AVX512F__)
    if (use_avx512()) {
        const __m512 vmax = _mm512_set1_ps(max);
        for (; v + 16 <= V; v += 16)
            if (const __mmask16 eq = _mm512_cmpeq_ps_mask(_mm512_loadu_ps(row + v), vmax))
                return v + __builtin_ctz(eq);
    }
#endif
    for (; v < V; ++v)
        if (row[v] == max) return v;
    // A NaN maximum equals no element.
    return std::max_element(row, row + V) - row;
}

}  // namespace weft::kernels
