// Entry points of attention.hpp: shape checks, the fused-qkv wrappers, and the portable path. The
// portable path keeps the algorithm of the vector ones (online softmax over key blocks, backward
// by key block with dQ accumulated in place) one query row at a time, in plain loops.
#include "weft/kernels/attention/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/paths.hpp"
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
            const int64_t kvh = h / group_size(s);
            const float* kb = k + b * s.Tk * s.ldkv + kvh * HS;
            const float* vb = v + b * s.Tk * s.ldkv + kvh * HS;
            for (int64_t i = i0; i < i1; ++i) {
                const float* qi = q + (b * s.Tq + i) * s.ldq + h * HS;
                const int64_t kend = visible_keys(s, i);
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
                if (l > 0.0f) {
                    for (int64_t d = 0; d < HS; ++d) oi[d] = acc[d] / l;
                    lse[bh * s.Tq + i] = m + std::log(l);
                } else {  // no visible key: an empty softmax, zeros and -inf rather than 0/0
                    std::fill(oi, oi + HS, 0.0f);
                    lse[bh * s.Tq + i] = -std::numeric_limits<float>::infinity();
                }
            }
        }
    }
}

namespace {

// One query head's backward, key block by key block: dK and dV of a block accumulate over the
// queries that see it and are added to g once, dQ is added to the head's own rows in place.
void backward_head(float* dq, const KvGrad& g, const float* dout, const float* q, const float* k,
                   const float* v, const float* out, const float* lse, const AttentionShape& s,
                   int64_t b, int64_t h, float* D, float* dkacc, float* dvacc) {
    const int64_t HS = s.HS, kvh = h / group_size(s), rel = s.q_pos0 - s.k_pos0;
    const float scale = 1.0f / std::sqrt(float(HS));
    auto qrow = [&](auto* base, int64_t i) { return base + (b * s.Tq + i) * s.ldq + h * HS; };
    auto orow = [&](auto* base, int64_t i) { return base + (b * s.Tq + i) * s.ldo + h * HS; };
    auto krow = [&](const float* base, int64_t j) {
        return base + (b * s.Tk + j) * s.ldkv + kvh * HS;
    };
    const float* lseb = lse + (b * s.NH + h) * s.Tq;
    for (int64_t i = 0; i < s.Tq; ++i) D[i] = dot(orow(dout, i), orow(out, i), HS);
    for (int64_t k0 = 0; k0 < s.Tk; k0 += kBlock) {
        const int64_t first = std::max<int64_t>(0, k0 - rel);  // first query seeing key k0
        if (first >= s.Tq) break;
        const int64_t nk = std::min(kBlock, s.Tk - k0);
        std::fill(dkacc, dkacc + kBlock * HS, 0.0f);
        std::fill(dvacc, dvacc + kBlock * HS, 0.0f);
        for (int64_t i = first; i < s.Tq; ++i) {
            const float* qi = qrow(q, i);
            const float* doi = orow(dout, i);
            float* dqi = qrow(dq, i);
            const int64_t visible = std::min(nk, visible_keys(s, i) - k0);
            for (int64_t j = 0; j < visible; ++j) {
                const float* kj = krow(k, k0 + j);
                const float p = std::exp(scale * dot(qi, kj, HS) - lseb[i]);
                const float dp = dot(doi, krow(v, k0 + j), HS);
                const float ds = p * (dp - D[i]) * scale;
                axpy(dvacc + j * HS, p, doi, HS);
                axpy(dkacc + j * HS, ds, qi, HS);
                axpy(dqi, ds, kj, HS);
            }
        }
        for (int64_t j = 0; j < nk; ++j) {
            axpy(g.dk + (k0 + j) * g.ld, 1.0f, dkacc + j * HS, HS);
            axpy(g.dv + (k0 + j) * g.ld, 1.0f, dvacc + j * HS, HS);
        }
    }
}

// The calling thread's private dK/dV partials, kept between calls as the AVX-512 path keeps its
// scratch: fresh pages every call would cost more to fault in than adding them up does.
float* partial_scratch(size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

}  // namespace

ForwardPlan::ForwardPlan(const AttentionShape& s, int64_t block)
    : s_(s), block_(block), blocks_((s.Tq + block - 1) / block), heads_(s.B * s.NH) {
    const int64_t threads = worth_threads(s) ? omp_get_max_threads() : 1;
    whole_ = heads_ - heads_ % threads;
    threads_ = items() > 1 && worth_threads(s);
}

BackwardPlan::BackwardPlan(float* dk, float* dv, const AttentionShape& s)
    : s_(s), dk_(dk), dv_(dv), G_(group_size(s)) {
    const int64_t threads = worth_threads(s) ? omp_get_max_threads() : 1;
    // Rounds of items the busiest thread runs; an item of G heads counts G.
    auto rounds = [&](int64_t n) { return (n + threads - 1) / threads; };
    const bool priv = G_ > 1 && rounds(s.B * s.NH) < G_ * rounds(s.B * kv_heads(s));
    per_item_ = priv ? 1 : G_;
    items_ = s.B * s.NH / per_item_;
    threads_ = items_ > 1 && worth_threads(s);
    if (priv) partials_ = partial_scratch(size_t(2 * s.B * s.NH * s.Tk * s.HS));
}

KvGrad BackwardPlan::kv_grad(int64_t b, int64_t h) const {
    const AttentionShape& s = s_;
    if (!partials_) {
        const int64_t off = b * s.Tk * s.ldkv + (h / G_) * s.HS;
        return {dk_ + off, dv_ + off, s.ldkv};
    }
    const int64_t head = s.Tk * s.HS;
    float* pk = partials_ + (b * s.NH + h) * head;
    float* pv = pk + s.B * s.NH * head;
    std::memset(pk, 0, sizeof(float) * size_t(head));
    std::memset(pv, 0, sizeof(float) * size_t(head));
    return {pk, pv, s.HS};
}

void BackwardPlan::finish() const {
    if (!partials_) return;
    const AttentionShape& s = s_;
    const int64_t HS = s.HS, NKV = kv_heads(s), head = s.Tk * HS, dv_off = s.B * s.NH * head;
    const int64_t kmax = visible_keys(s, s.Tq - 1);  // later keys are seen by no query
    // One add per head, in head order, as the shared items do it: the same sums, bit for bit.
#pragma omp parallel for schedule(static) if (threads_)
    for (int64_t r = 0; r < s.B * kmax; ++r) {
        const int64_t b = r / kmax, t = r % kmax;
        for (int64_t kvh = 0; kvh < NKV; ++kvh) {
            float* dkr = dk_ + (b * s.Tk + t) * s.ldkv + kvh * HS;
            float* dvr = dv_ + (b * s.Tk + t) * s.ldkv + kvh * HS;
            for (int64_t g = 0; g < G_; ++g) {
                const float* pk = partials_ + (b * s.NH + kvh * G_ + g) * head + t * HS;
                for (int64_t d = 0; d < HS; ++d) dkr[d] += pk[d];
                for (int64_t d = 0; d < HS; ++d) dvr[d] += pk[dv_off + d];
            }
        }
    }
}

void attention_backward_portable(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out, const float* lse,
                                 const AttentionShape& s) {
    struct Scratch {
        std::vector<float> D, dkacc, dvacc;
    };
    BackwardPlan(dk, dv, s).run(
        [&] {
            return Scratch{std::vector<float>(size_t(s.Tq)),
                           std::vector<float>(size_t(kBlock * s.HS)),
                           std::vector<float>(size_t(kBlock * s.HS))};
        },
        [&](Scratch& w, int64_t b, int64_t h, const KvGrad& g) {
            backward_head(dq, g, dout, q, k, v, out, lse, s, b, h, w.D.data(), w.dkacc.data(),
                          w.dvacc.data());
        });
}

void check_shape(const AttentionShape& s, const char* where) {
    WEFT_CHECK(s.B >= 0 && s.Tq >= 0 && s.Tk >= 0 && s.NH >= 0,
               "{}: B={}, Tq={}, Tk={}, NH={} must not be negative", where, s.B, s.Tq, s.Tk, s.NH);
    WEFT_CHECK(s.HS >= 1, "{}: head size HS={} must be at least 1", where, s.HS);
    WEFT_CHECK(s.Tq == 0 || s.Tk >= 1, "{}: Tq={} queries need at least one key, Tk={}", where,
               s.Tq, s.Tk);
    WEFT_CHECK(s.q_pos0 >= 0 && s.k_pos0 >= 0,
               "{}: positions q_pos0={}, k_pos0={} of the first query and key must not be negative",
               where, s.q_pos0, s.k_pos0);
    WEFT_CHECK(s.NKV >= 0 && (s.NKV == 0 || s.NH % s.NKV == 0),
               "{}: NKV={} key/value heads must divide the NH={} query heads (0 means NH)", where,
               s.NKV, s.NH);
    const int64_t C = s.NH * s.HS, CKV = detail::kv_heads(s) * s.HS;
    WEFT_CHECK(s.ldq >= C && s.ldo >= C,
               "{}: strides ldq={}, ldo={} must be at least NH*HS={} (NH={}, HS={})", where, s.ldq,
               s.ldo, C, s.NH, s.HS);
    WEFT_CHECK(s.ldkv >= CKV, "{}: stride ldkv={} must be at least NKV*HS={} (NKV={}, HS={})",
               where, s.ldkv, CKV, detail::kv_heads(s), s.HS);
    // Far past any context length; keeps every position and difference of positions in 32 bits.
    WEFT_CHECK(s.k_pos0 + s.Tk < (int64_t(1) << 30) && s.q_pos0 + s.Tq < (int64_t(1) << 30),
               "{}: k_pos0+Tk={}, q_pos0+Tq={} exceed 2^30", where, s.k_pos0 + s.Tk,
               s.q_pos0 + s.Tq);
}

}  // namespace detail

using detail::check_shape;

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
    WEFT_PROFILE("attention_fwd");
    check_shape(s, "attention_forward");
    if (s.B == 0 || s.NH == 0 || s.Tq == 0) return;
#if defined(__AVX512F__)
    if (kernel_isa() == Isa::avx512) return detail::attention_forward_avx512(out, lse, q, k, v, s);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (kernel_isa() == Isa::avx2) return detail::attention_forward_avx2(out, lse, q, k, v, s);
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
#if defined(__AVX2__) && defined(__FMA__)
    if (kernel_isa() == Isa::avx2)
        return detail::attention_backward_avx2(dq, dk, dv, dout, q, k, v, out, lse, s);
#endif
    detail::attention_backward_portable(dq, dk, dv, dout, q, k, v, out, lse, s);
}

namespace {

// The shape of the fused layout: rows of [q (NH*HS) | k (NKV*HS) | v (NKV*HS)], checked before any
// pointer into it is formed.
AttentionShape qkv_shape(int64_t B, int64_t T, int64_t NH, int64_t HS, int64_t NKV,
                         const char* where) {
    WEFT_CHECK(B >= 0 && T >= 0 && NH >= 0 && HS >= 1 && NKV >= 0,
               "{}: B={}, T={}, NH={}, NKV={} must not be negative and HS={} must be positive",
               where, B, T, NH, NKV, HS);
    const int64_t A = NH * HS, KV = (NKV > 0 ? NKV : NH) * HS;
    AttentionShape s{B, T, T, NH, HS, A + 2 * KV, A + 2 * KV, A};
    s.NKV = NKV;
    check_shape(s, where);
    return s;
}

}  // namespace

void attention_forward_qkv(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                           int64_t NH, int64_t HS, int64_t NKV) {
    WEFT_PROFILE("attention_fwd");
    const AttentionShape s = qkv_shape(B, T, NH, HS, NKV, "attention_forward_qkv");
    const int64_t A = NH * HS, KV = detail::kv_heads(s) * HS;
    attention_forward(out, lse, qkv, qkv + A, qkv + A + KV, s);
}

void attention_backward_qkv(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t NH, int64_t HS,
                            int64_t NKV) {
    WEFT_PROFILE("attention_bwd");
    const AttentionShape s = qkv_shape(B, T, NH, HS, NKV, "attention_backward_qkv");
    const int64_t A = NH * HS, KV = detail::kv_heads(s) * HS, ld = s.ldq;
#pragma omp parallel for schedule(static) if (B * T * ld > (int64_t(1) << 16))
    for (int64_t r = 0; r < B * T; ++r) std::memset(dqkv + r * ld, 0, sizeof(float) * ld);
    attention_backward(dqkv, dqkv + A, dqkv + A + KV, dout, qkv, qkv + A, qkv + A + KV, out, lse,
                       s);
}

}  // namespace weft::kernels
