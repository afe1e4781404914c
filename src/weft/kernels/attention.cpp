// Entry points of attention.hpp: shape checks, the fused-qkv wrappers, and the portable path. The
// portable path keeps the algorithm of the AVX-512 one (online softmax over key blocks, backward
// by key block with dQ accumulated in place) one query row at a time, in plain loops.
#include "weft/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/attention_paths.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace detail {

namespace {

constexpr int64_t kBlock = 64;  // query rows per forward work item, keys per backward block

float dot(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
    for (int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
    return acc;
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
    for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

}  // namespace

void attention_forward_portable(float* out, float* lse, const float* q, const float* k,
                                const float* v, const AttentionShape& s) {
    const int64_t HS = s.HS, blocks = (s.Tq + kBlock - 1) / kBlock;
    const int64_t items = s.B * s.NH * blocks;
    const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (items > 1 && worth_threads(s))
    {
        std::vector<float> score(kBlock), acc(HS);
#pragma omp for schedule(dynamic)
        for (int64_t it = 0; it < items; ++it) {
            const int64_t bh = it / blocks, b = bh / s.NH, h = bh % s.NH;
            const int64_t i0 = (it % blocks) * kBlock, i1 = std::min(s.Tq, i0 + kBlock);
            const float* kb = k + b * s.Tk * s.ldkv + h * HS;
            const float* vb = v + b * s.Tk * s.ldkv + h * HS;
            for (int64_t i = i0; i < i1; ++i) {
                const float* qi = q + (b * s.Tq + i) * s.ldq + h * HS;
                const int64_t kend = std::min(s.Tk, s.q_pos0 + i + 1);
                float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t k0 = 0; k0 < kend; k0 += kBlock) {
                    const int64_t nk = std::min(kBlock, kend - k0);
                    float mx = m;
                    for (int64_t j = 0; j < nk; ++j) {
                        score[j] = scale * dot(qi, kb + (k0 + j) * s.ldkv, HS);
                        mx = std::max(mx, score[j]);
                    }
                    const float alpha = std::exp(m - mx);  // 0 on the first block (m = -inf)
                    l *= alpha;
                    for (int64_t d = 0; d < HS; ++d) acc[d] *= alpha;
                    for (int64_t j = 0; j < nk; ++j) {
                        const float p = std::exp(score[j] - mx);
                        l += p;
                        axpy(acc.data(), p, vb + (k0 + j) * s.ldkv, HS);
                    }
                    m = mx;
                }
                float* oi = out + (b * s.Tq + i) * s.ldo + h * HS;
                for (int64_t d = 0; d < HS; ++d) oi[d] = acc[d] / l;
                lse[bh * s.Tq + i] = m + std::log(l);
            }
        }
    }
}

void attention_backward_portable(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out, const float* lse,
                                 const AttentionShape& s) {
    const int64_t HS = s.HS, heads = s.B * s.NH;
    const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (heads > 1 && worth_threads(s))
    {
        std::vector<float> D(s.Tq), dkacc(kBlock * HS), dvacc(kBlock * HS);
        // A thread owns a whole (batch, head), so its dQ rows are written by no one else.
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < heads; ++bh) {
            const int64_t b = bh / s.NH, h = bh % s.NH;
            auto qrow = [&](auto* base, int64_t i) {
                return base + (b * s.Tq + i) * s.ldq + h * HS;
            };
            auto orow = [&](auto* base, int64_t i) {
                return base + (b * s.Tq + i) * s.ldo + h * HS;
            };
            auto krow = [&](auto* base, int64_t j) {
                return base + (b * s.Tk + j) * s.ldkv + h * HS;
            };
            for (int64_t i = 0; i < s.Tq; ++i) D[i] = dot(orow(dout, i), orow(out, i), HS);
            for (int64_t k0 = 0; k0 < s.Tk; k0 += kBlock) {
                const int64_t first = std::max<int64_t>(0, k0 - s.q_pos0);
                if (first >= s.Tq) break;
                const int64_t nk = std::min(kBlock, s.Tk - k0);
                std::fill(dkacc.begin(), dkacc.end(), 0.0f);
                std::fill(dvacc.begin(), dvacc.end(), 0.0f);
                for (int64_t i = first; i < s.Tq; ++i) {
                    const float* qi = qrow(q, i);
                    const float* doi = orow(dout, i);
                    float* dqi = qrow(dq, i);
                    const float lse_i = lse[bh * s.Tq + i];
                    const int64_t visible = std::min(nk, s.q_pos0 + i - k0 + 1);
                    for (int64_t j = 0; j < visible; ++j) {
                        const float* kj = krow(k, k0 + j);
                        const float p = std::exp(scale * dot(qi, kj, HS) - lse_i);
                        const float dp = dot(doi, krow(v, k0 + j), HS);
                        const float ds = p * (dp - D[i]) * scale;
                        axpy(dvacc.data() + j * HS, p, doi, HS);
                        axpy(dkacc.data() + j * HS, ds, qi, HS);
                        axpy(dqi, ds, kj, HS);
                    }
                }
                for (int64_t j = 0; j < nk; ++j) {
                    axpy(krow(dk, k0 + j), 1.0f, dkacc.data() + j * HS, HS);
                    axpy(krow(dv, k0 + j), 1.0f, dvacc.data() + j * HS, HS);
                }
            }
        }
    }
}

}  // namespace detail

namespace {

void check_shape(const AttentionShape& s, const char* where) {
    WEFT_CHECK(s.B >= 0 && s.Tq >= 0 && s.Tk >= 0 && s.NH >= 0,
               "{}: B={}, Tq={}, Tk={}, NH={} must not be negative", where, s.B, s.Tq, s.Tk, s.NH);
    WEFT_CHECK(s.HS >= 1, "{}: head size HS={} must be at least 1", where, s.HS);
    WEFT_CHECK(s.Tq == 0 || s.Tk >= 1, "{}: Tq={} queries need at least one key, Tk={}", where,
               s.Tq, s.Tk);
    WEFT_CHECK(s.q_pos0 >= 0, "{}: q_pos0={} must not be negative", where, s.q_pos0);
    const int64_t C = s.NH * s.HS;
    WEFT_CHECK(s.ldq >= C && s.ldkv >= C && s.ldo >= C,
               "{}: strides ldq={}, ldkv={}, ldo={} must be at least NH*HS={}", where, s.ldq,
               s.ldkv, s.ldo, C);
    // The AVX-512 path compares key and query offsets in 32-bit lanes.
    WEFT_CHECK(s.Tk < (int64_t(1) << 30) && s.q_pos0 + s.Tq < (int64_t(1) << 30),
               "{}: Tk={}, q_pos0+Tq={} exceed 2^30", where, s.Tk, s.q_pos0 + s.Tq);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
    WEFT_PROFILE("attention_fwd");
    check_shape(s, "attention_forward");
    if (s.B == 0 || s.NH == 0 || s.Tq == 0) return;
#if defined(__AVX512F__)
    if (kernel_isa() == Isa::avx512) return detail::attention_forward_avx512(out, lse, q, k, v, s);
#endif
    detail::attention_forward_portable(out, lse, q, k, v, s);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        const AttentionShape& s) {
    WEFT_PROFILE("attention_bwd");
    check_shape(s, "attention_backward");
    if (s.B == 0 || s.NH == 0 || s.Tq == 0) return;
#if defined(__AVX512F__)
    if (kernel_isa() == Isa::avx512)
        return detail::attention_backward_avx512(dq, dk, dv, dout, q, k, v, out, lse, s);
#endif
    detail::attention_backward_portable(dq, dk, dv, dout, q, k, v, out, lse, s);
}

void attention_forward_qkv(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                           int64_t NH, int64_t HS) {
    WEFT_PROFILE("attention_fwd");
    const int64_t C = NH * HS;
    attention_forward(out, lse, qkv, qkv + C, qkv + 2 * C, {B, T, T, NH, HS, 3 * C, 3 * C, C});
}

void attention_backward_qkv(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    WEFT_PROFILE("attention_bwd");
    const int64_t C = NH * HS, n = B * T * 3 * C;
    WEFT_CHECK(n >= 0, "attention_backward_qkv: B={}, T={}, NH={}, HS={} must not be negative", B,
               T, NH, HS);
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
    for (int64_t r = 0; r < B * T; ++r) std::memset(dqkv + r * 3 * C, 0, sizeof(float) * 3 * C);
    attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, lse,
                       {B, T, T, NH, HS, 3 * C, 3 * C, C});
}

}  // namespace weft::kernels
