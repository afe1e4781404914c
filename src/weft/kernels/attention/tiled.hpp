#pragma once
// The tiled attention of the vectorised paths, written once over a vector type V (see
// tiles.hpp). Every tile product is one register-blocked micro-kernel,
// C[r][:] (+)= Σ_t A(r, t) · X[t][:], that broadcasts A and streams contiguous rows of X.
// Choosing which side of each product is A keeps every X contiguous without transposing inside
// the loops:
//   forward   Sᵀ = K · Qᵀ   (keys × queries: queries in lanes, so the running max and sum of the
//                            online softmax are lane-wise, never reductions; Qᵀ packed per block)
//             O += P · V    (A = Pᵀ read down its columns, X = rows of V)
//   backward  S = Q · Kᵀ, dP = dO · Vᵀ   (keys in lanes; Kᵀ, Vᵀ packed once per key block)
//             dV += Pᵀ · dO, dK += dSᵀ · Q, dQ += dS · K   (all operands in natural layout)
// Tiles are 64 × 64; measured on Zen 5 (AVX-512) the products run at the FMA peak, and what is
// left is softmax, packing and memory. Included by avx512.cpp and avx2.cpp,
// each of which supplies V and instantiates forward<V> and backward<V>.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/kernels/attention/paths.hpp"
#include "weft/kernels/attention/tiles.hpp"

namespace weft::kernels::detail::tiled {

// Rows [i0, i0 + 64) of one (batch, head): the keys they can see, 64 at a time, with the online
// softmax of FlashAttention (running max m and sum l per query, the output rescaled as m grows).
// Scores are computed transposed, keys × queries, so that m and l are per lane.
template <class V>
[[gnu::noinline]] void forward_block(float* out, float* lse, const float* q,
                                     const AttentionShape& s, int64_t b, int64_t h, int64_t i0,
                                     const float* kd, const float* vd, float* qt, float* oacc,
                                     float* st, float* alpha) {
    const int64_t HS = s.HS;
    const int64_t nq = std::min<int64_t>(kTile, s.Tq - i0);
    using reg = typename V::reg;
    constexpr int W = V::W, kVecs = kTile / W;
    const int64_t nqv = (nq + W - 1) / W, width = W * nqv;
    // Scores in units of log2 so the softmax is exp2, with 1/√HS folded into the packed queries.
    const float c = kLog2e / std::sqrt(float(HS));

    const float* qb = q + (b * s.Tq + i0) * s.ldq + h * HS;
    float* ob = out + (b * s.Tq + i0) * s.ldo + h * HS;
    const int64_t kend = visible_keys(s, i0 + nq - 1);  // keys past it are masked for all
    prefetch_rows(qb, s.ldq, nq, HS);
    pack_transposed<V>(qt, qb, s.ldq, nq, width, HS, c);
    std::memset(oacc, 0, sizeof(float) * nq * HS);

    reg m[kVecs], l[kVecs];
    for (int j = 0; j < kVecs; ++j) {
        // Lowest finite, not -inf, so that m - m_new is never inf - inf.
        m[j] = V::set1(-3.0e38f);
        l[j] = V::zero();
    }
    const reg neg_inf = V::set1(-INFINITY);
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
        const int64_t nk = std::min<int64_t>(kTile, kend - k0);
        if (k0 + kTile >= kend) {
            // Last tile: fetch the rows this block writes, and the queries of the block that
            // this thread (or its neighbour) most likely takes next.
            prefetch_rows<_MM_HINT_T1>(ob, s.ldo, nq, HS);
            if (i0 >= kTile) prefetch_rows<_MM_HINT_T1>(qb - kTile * s.ldq, s.ldq, kTile, HS);
        }
        tile_product<V, Init::zero, false>(st, kTile, nk, width, kd + k0 * HS, HS, qt, kTile, HS);
        // Key k0 + j is visible to query lane i iff i >= j + shift.
        const int64_t shift = k0 - (s.q_pos0 - s.k_pos0) - i0;
        const bool diagonal = nk - 1 + shift > 0;
        for (int64_t vq = 0; vq < nqv; ++vq) {
            float* col = st + W * vq;
            reg mx = m[vq];
            for (int64_t j = 0; j < nk; ++j) {
                reg x = V::load(col + j * kTile);
                if (diagonal) {
                    // Lanes below j + shift - W·vq do not see key j.
                    x = V::blend(x, V::prefix(std::clamp<int64_t>(j + shift - W * vq, 0, W)),
                                 neg_inf);
                    V::store(col + j * kTile, x);
                }
                mx = V::max(mx, x);
            }
            reg sum = V::zero();
            for (int64_t j = 0; j < nk; ++j) {
                const reg p = V::exp2(V::sub(V::load(col + j * kTile), mx));
                V::store(col + j * kTile, p);
                sum = V::add(sum, p);
            }
            const reg a = V::exp2(V::sub(m[vq], mx));
            V::store(alpha + W * vq, a);
            l[vq] = V::fmadd(l[vq], a, sum);
            m[vq] = mx;
        }
        // O[i][:] = alpha_i O[i][:] + Σ_j Pᵀ[j][i] V[j][:]: Pᵀ is read down its columns.
        tile_product<V, Init::scale_rows, true>(oacc, HS, nq, HS, st, kTile, vd + k0 * HS, HS, nk,
                                                alpha, {Band::upper, -shift});
    }

    alignas(64) float mrow[kTile], lrow[kTile];
    for (int j = 0; j < kVecs; ++j) {
        V::store(mrow + W * j, m[j]);
        V::store(lrow + W * j, l[j]);
    }
    float* lse_b = lse + (b * s.NH + h) * s.Tq + i0;
    for (int64_t i = 0; i < nq; ++i) {
        // A row that saw no key (a block wholly after it) has l = 0: zeros and -inf, not 0·∞.
        const bool seen = lrow[i] > 0.0f;
        lse_b[i] = seen ? (mrow[i] + std::log2(lrow[i])) * kLn2 : -INFINITY;
        const reg inv = V::set1(seen ? 1.0f / lrow[i] : 0.0f);
        for (int64_t d = 0; d < HS; d += W) {
            const auto msk = cols_from<V>(d, HS);
            V::mask_storeu(ob + i * s.ldo + d, msk,
                           V::mul(V::maskz_loadu(msk, oacc + i * HS + d), inv));
        }
    }
}

// One (batch, query head), key block by key block (FlashAttention-2's backward): dK and dV of a
// block accumulate in scratch over the query blocks that see it and are added to g once, dQ in a
// dense copy of the head added to dq at the end. A thread owns the whole (batch, head), so dQ
// needs no atomics and no reduction over threads, and every sum is taken in the same order
// whatever the thread count. The price is parallelism of at most B·NH items, plenty for training
// shapes (48 for GPT-2 small at B=4, still 12 at tensor-parallel degree 4); BackwardPlan decides
// how the query heads of a key/value group share its dK and dV.
template <class V>
[[gnu::noinline]] void backward_head(float* dq, const KvGrad& g, const float* dout, const float* q,
                                     const float* k, const float* v, const float* out,
                                     const float* lse, const AttentionShape& s, int64_t b,
                                     int64_t h, float* work) {
    const int64_t HS = s.HS, Tq = s.Tq, Tk = s.Tk, rel = s.q_pos0 - s.k_pos0;
    const float scale = 1.0f / std::sqrt(float(HS));
    const float c = scale * kLog2e;
    using reg = typename V::reg;
    constexpr int W = V::W;
    float* kt = work;
    float* vt = kt + HS * kTile;
    float* pb = vt + HS * kTile;
    float* dsb = pb + kTile * kTile;
    float* dkacc = dsb + kTile * kTile;
    float* dvacc = dkacc + kTile * HS;
    float* kn = dvacc + kTile * HS;
    // Dense copies of the head's Q and dO and its dQ: every key block sweeps them again, and
    // dense rows stream from L2 where rows 9 KiB apart in the fused layout miss.
    float* qd = kn + kTile * HS;
    float* dod = qd + Tq * HS;
    float* dqd = dod + Tq * HS;
    float* Dr = dqd + Tq * HS;
    float* lse2 = Dr + Tq;

    const float* qb = q + b * Tq * s.ldq + h * HS;
    float* dqb = dq + b * Tq * s.ldq + h * HS;
    const int64_t kvh = h / group_size(s);
    const float* kb = k + b * Tk * s.ldkv + kvh * HS;
    const float* vb = v + b * Tk * s.ldkv + kvh * HS;
    const float* dob = dout + b * Tq * s.ldo + h * HS;
    const float* ob = out + b * Tq * s.ldo + h * HS;
    const float* lseb = lse + (b * s.NH + h) * Tq;

    prefetch_rows(kb, s.ldkv, std::min<int64_t>(kTile, Tk), HS);
    prefetch_rows(vb, s.ldkv, std::min<int64_t>(kTile, Tk), HS);
    pack_rows<V>(qd, qb, s.ldq, Tq, HS);
    pack_rows<V>(dod, dob, s.ldo, Tq, HS);
    std::memset(dqd, 0, sizeof(float) * Tq * HS);
    prefetch_rows(ob, s.ldo, std::min(Tq, kAhead), HS);
    for (int64_t i = 0; i < Tq; ++i) {
        if (i + kAhead < Tq) prefetch_rows(ob + (i + kAhead) * s.ldo, s.ldo, 1, HS);
        reg acc = V::zero();
        for (int64_t d = 0; d < HS; d += W) {
            const auto m = cols_from<V>(d, HS);
            acc = V::fmadd(V::maskz_loadu(m, dod + i * HS + d),
                           V::maskz_loadu(m, ob + i * s.ldo + d), acc);
        }
        Dr[i] = V::reduce_add(acc);
        lse2[i] = lseb[i] * kLog2e;
    }

    for (int64_t k0 = 0; k0 < Tk; k0 += kTile) {
        const int64_t first = std::max<int64_t>(0, k0 - rel);  // first query seeing key k0
        if (first >= Tq) break;
        const int64_t nk = std::min<int64_t>(kTile, Tk - k0);
        const int64_t nkv = (nk + W - 1) / W, width = W * nkv;
        pack_transposed<V>(kt, kb + k0 * s.ldkv, s.ldkv, nk, width, HS, 1.0f);
        pack_transposed<V>(vt, vb + k0 * s.ldkv, s.ldkv, nk, width, HS, 1.0f);
        pack_rows<V>(kn, kb + k0 * s.ldkv, s.ldkv, nk, HS);
        if (k0 + kTile < Tk) {
            const int64_t next = std::min<int64_t>(kTile, Tk - k0 - kTile);
            prefetch_rows<_MM_HINT_T1>(kb + (k0 + kTile) * s.ldkv, s.ldkv, next, HS);
            prefetch_rows<_MM_HINT_T1>(vb + (k0 + kTile) * s.ldkv, s.ldkv, next, HS);
        }
        std::memset(dkacc, 0, sizeof(float) * nk * HS);
        std::memset(dvacc, 0, sizeof(float) * nk * HS);

        for (int64_t i0 = first; i0 < Tq; i0 += kTile) {
            const int64_t nq = std::min<int64_t>(kTile, Tq - i0);
            const float* qp = qd + i0 * HS;
            const float* dop = dod + i0 * HS;
            tile_product<V, Init::zero, false>(pb, kTile, nq, width, qp, HS, kt, kTile, HS);
            tile_product<V, Init::zero, false>(dsb, kTile, nq, width, dop, HS, vt, kTile, HS);
            // P and dS in place of S and dP, in one pass over both: P = exp2(S·c - lse) where
            // visible, and dS = P ⊙ (dP - D) with the 1/√HS of the scores folded in, so that dK
            // and dQ are plain products.
            const reg cv = V::set1(c), sc = V::set1(scale);
            for (int64_t i = 0; i < nq; ++i) {
                // Keys k0 + j with j <= last are visible to query i0 + i (and exist).
                const int64_t last = std::min(rel + i0 + i - k0, nk - 1);
                const reg lse_i = V::set1(lse2[i0 + i]), D_i = V::set1(Dr[i0 + i]);
                for (int64_t vk = 0; vk < nkv; ++vk) {
                    float* p = pb + i * kTile + W * vk;
                    float* ds = dsb + i * kTile + W * vk;
                    const auto vis = V::prefix(std::clamp<int64_t>(last + 1 - W * vk, 0, W));
                    const reg pv = V::maskz(vis, V::exp2(V::fmsub(V::load(p), cv, lse_i)));
                    V::store(p, pv);
                    V::store(ds, V::mul(pv, V::mul(V::sub(V::load(ds), D_i), sc)));
                }
            }
            // Key k0 + j is visible to query i0 + i iff i >= j + shift.
            const int64_t shift = k0 - rel - i0;
            tile_product<V, Init::load, true>(dvacc, HS, nk, HS, pb, kTile, dop, HS, nq, nullptr,
                                              {Band::lower, shift});
            tile_product<V, Init::load, true>(dkacc, HS, nk, HS, dsb, kTile, qp, HS, nq, nullptr,
                                              {Band::lower, shift});
            tile_product<V, Init::load, false>(dqd + i0 * HS, HS, nq, HS, dsb, kTile, kn, HS, nk,
                                               nullptr, {Band::upper, -shift});
        }
        add_rows<V>(g.dk + k0 * g.ld, g.ld, dkacc, nk, HS);
        add_rows<V>(g.dv + k0 * g.ld, g.ld, dvacc, nk, HS);
    }
    add_rows<V>(dqb, s.ldq, dqd, Tq, HS);
}

// attention_forward for validated shapes: one work item per (batch, head, block of 64 queries).
template <class V>
void forward(float* out, float* lse, const float* q, const float* k, const float* v,
             const AttentionShape& s) {
    const int64_t HS = s.HS;
    // Keys any query of the call sees: the K and V rows worth copying.
    const int64_t kmax = visible_keys(s, s.Tq - 1);
    const ForwardPlan plan(s, kTile);
#pragma omp parallel if (plan.threads())
    {
        float* qt = thread_scratch(3 * HS * kTile + kTile * kTile + kTile + 2 * kmax * HS);
        float* oacc = qt + HS * kTile;
        float* st = oacc + kTile * HS;
        float* alpha = st + kTile * kTile;
        // A dense copy of the current key/value head's K and V, grown as blocks need more keys:
        // every query block (of every query head in its group) reads them, and dense rows stream
        // where rows 9 KiB apart in the fused layout defeat the prefetchers.
        float* kd = alpha + kTile;
        float* vd = kd + kmax * HS;
        plan.run_thread(
            [&](int64_t b, int64_t kvh, int64_t from, int64_t to) {
                const int64_t off = (b * s.Tk + from) * s.ldkv + kvh * HS;
                pack_rows<V>(kd + from * HS, k + off, s.ldkv, to - from, HS);
                pack_rows<V>(vd + from * HS, v + off, s.ldkv, to - from, HS);
            },
            [&](int64_t b, int64_t h, int64_t i0) {
                forward_block<V>(out, lse, q, s, b, h, i0, kd, vd, qt, oacc, st, alpha);
            });
    }
}

// attention_backward for validated shapes: work items as BackwardPlan splits them.
template <class V>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const float* out, const float* lse, const AttentionShape& s) {
    BackwardPlan(dk, dv, s).run(
        [&] {
            return thread_scratch(5 * s.HS * kTile + 2 * kTile * kTile + (3 * s.HS + 2) * s.Tq);
        },
        [&](float* work, int64_t b, int64_t h, const KvGrad& g) {
            backward_head<V>(dq, g, dout, q, k, v, out, lse, s, b, h, work);
        });
}

}  // namespace weft::kernels::detail::tiled
