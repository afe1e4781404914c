// The AVX512-BF16 path of attention_forward_bf16 / attention_backward_bf16 (attention.hpp):
// the algorithm and tiling of tiled.hpp, with every tile product on bf16 operands
// (_mm512_dpbf16_ps, two bf16 products per fp32 lane) and everything else fp32: the scores,
// the online softmax's running max and sum, the lse, D = rowsum(dO∘O), and the accumulators of
// O, dQ, dK and dV. The operands are what FlashAttention's bf16 kernels multiply: Q, K, V and
// dO as given, and the probabilities P and the score gradients dS rounded to bf16 (to nearest
// even) before their products. So the result differs from the fp32 kernel on the same inputs
// by those roundings (test_attention_bf16 bounds it against a float64 reference).
//
// The products, with the pair layouts of bf16_tiles.hpp (A broadcast, X streamed):
//   forward   Sᵀ = K · Qᵀ    A = K rows (pairs along HS), X = Qᵀ (Q rows transposed by word)
//             O += P · V     A = P paired over keys (packed by the softmax), X = V paired over keys
//   backward  S = Q · Kᵀ, dP = dO · Vᵀ    A = Q, dO rows; X = Kᵀ, Vᵀ transposed by word
//             dV += Pᵀ · dO, dK += dSᵀ · Q   A = P, dS paired over queries; X = dO, Q paired so
//             dQ += dS · K   A = dS rows in bf16; X = K paired over keys
// Head sizes must be even (a row of Q or K is HS/2 pairs); bf16.cpp widens odd ones.
#include "weft/kernels/attention/paths.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/kernels/attention/bf16_tiles.hpp"
#include "weft/kernels/lanes.hpp"

namespace weft::kernels::detail {

namespace {

using namespace avx512;

// A region of n words, rounded up to whole cache lines so that every region is 64-byte aligned.
constexpr int64_t al(int64_t n) {
    return (n + 15) / 16 * 16;
}

// Scratch of one thread, in words: forward and backward carve it as below (floats and pairs
// in regions of their own), sized by these counts so that the memory estimate reads the same.
struct ForwardScratch {
    int64_t qt, pp, kd, vp;   // pairs: Qᵀ, P, the head's K rows, its V paired over keys
    int64_t oacc, st, alpha;  // floats
    ForwardScratch(int64_t HS, int64_t kmax)
        : qt(al(HS / 2 * kTile)),
          pp(al(kTile / 2 * kTile)),
          kd(al(kmax * (HS / 2))),
          vp(al((kmax + 1) / 2 * HS)),
          oacc(al(kTile * HS)),
          st(al(kTile * kTile)),
          alpha(al(kTile)) {}
    int64_t words() const { return qt + pp + kd + vp + oacc + st + alpha; }
};

struct BackwardScratch {
    // pairs: Kᵀ and Vᵀ of a key block, K paired over keys, P and dS paired over queries, dS
    // rows, the head's Q and dO rows and both paired over queries
    int64_t kt, vt, kp, pt, dst, dsr, qd, dod, qp, dop;
    // floats: P and dS (fp32), dK and dV of the block, dQ of the head, D and lse·log2(e)
    int64_t pb, dsb, dkacc, dvacc, dqd, Dr, lse2;
    BackwardScratch(int64_t HS, int64_t Tq)
        : kt(al(HS / 2 * kTile)),
          vt(al(HS / 2 * kTile)),
          kp(al(kTile / 2 * HS)),
          pt(al(kTile / 2 * kTile)),
          dst(al(kTile / 2 * kTile)),
          dsr(al(kTile * kTile / 2)),
          qd(al(Tq * (HS / 2))),
          dod(al(Tq * (HS / 2))),
          qp(al((Tq + 1) / 2 * HS)),
          dop(al((Tq + 1) / 2 * HS)),
          pb(al(kTile * kTile)),
          dsb(al(kTile * kTile)),
          dkacc(al(kTile * HS)),
          dvacc(al(kTile * HS)),
          dqd(al(Tq * HS)),
          Dr(al(Tq)),
          lse2(al(Tq)) {}
    int64_t words() const {
        return kt + vt + kp + pt + dst + dsr + qd + dod + qp + dop + pb + dsb + dkacc + dvacc +
               dqd + Dr + lse2;
    }
};

// Hands out consecutive regions of a thread's scratch.
class Carve {
  public:
    explicit Carve(Pair* base) : next_(base) {}
    Pair* pairs(int64_t n) { return take(n); }
    float* floats(int64_t n) { return reinterpret_cast<float*>(take(n)); }

  private:
    Pair* take(int64_t n) {
        Pair* p = next_;
        next_ += n;
        return p;
    }
    Pair* next_;
};

// Rows [i0, i0 + 64) of one (batch, head), as tiled.hpp's forward_block: scores are
// keys × queries so the online softmax's max and sum are per lane.
[[gnu::noinline]] void forward_block(uint16_t* out, float* lse, const uint16_t* q,
                                     const AttentionShape& s, int64_t b, int64_t h, int64_t i0,
                                     const Pair* kd, const Pair* vp, Pair* qt, Pair* pp,
                                     float* oacc, float* st, float* alpha) {
    const int64_t HS = s.HS, HP = HS / 2;
    const int64_t nq = std::min<int64_t>(kTile, s.Tq - i0);
    const int64_t nqv = (nq + 15) / 16, width = 16 * nqv;
    // Scores in units of log2 so the softmax is exp2, p = exp2(s·c - m) with m the running max
    // of s·c: the scale is applied in fp32, as folded into bf16 queries it would round them
    // again.
    const __m512 c = _mm512_set1_ps(kLog2e / std::sqrt(float(HS)));

    const uint16_t* qb = q + (b * s.Tq + i0) * s.ldq + h * HS;
    uint16_t* ob = out + (b * s.Tq + i0) * s.ldo + h * HS;
    const int64_t kend = visible_keys(s, i0 + nq - 1);
    prefetch_rows(qb, s.ldq, nq, HS);
    pack_pairs_transposed(qt, qb, s.ldq, nq, width, HP);
    std::memset(oacc, 0, sizeof(float) * nq * HS);

    __m512 m[kVecs], l[kVecs];
    for (int j = 0; j < kVecs; ++j) {
        m[j] = _mm512_set1_ps(-3.0e38f);  // lowest finite: m - m_new is never inf - inf
        l[j] = _mm512_setzero_ps();
    }
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
        const int64_t nk = std::min<int64_t>(kTile, kend - k0), npair = (nk + 1) / 2;
        if (k0 + kTile >= kend) {
            // Last tile: fetch the rows this block writes, and the queries of the block that
            // this thread most likely takes next (tiled.hpp does the same).
            prefetch_rows<_MM_HINT_T1>(ob, s.ldo, nq, HS);
            if (i0 >= kTile) prefetch_rows<_MM_HINT_T1>(qb - kTile * s.ldq, s.ldq, kTile, HS);
        }
        tile_product_bf16<Init::zero, false>(st, kTile, nk, width, kd + k0 * HP, HP, qt, kTile, HP);
        // Key k0 + j is visible to query lane i iff i >= j + shift.
        const int64_t shift = k0 - (s.q_pos0 - s.k_pos0) - i0;
        const bool diagonal = nk - 1 + shift > 0;
        for (int64_t vq = 0; vq < nqv; ++vq) {
            float* col = st + 16 * vq;
            const __m512 raw = scan_column(col, nk, lane_index(int(vq)), shift, diagonal);
            const __m512 mx = _mm512_max_ps(m[vq], _mm512_mul_ps(raw, c));
            // P in fp32 for the sum, in bf16 pairs of keys for the product (an odd last key
            // pairs with a zero).
            __m512 sum = _mm512_setzero_ps();
            for (int64_t jp = 0; jp < npair; ++jp) {
                const int64_t j = 2 * jp;
                const __m512 p0 =
                    exp2_avx512(_mm512_fmsub_ps(_mm512_load_ps(col + j * kTile), c, mx));
                const __m512 p1 =
                    j + 1 < nk
                        ? exp2_avx512(_mm512_fmsub_ps(_mm512_load_ps(col + (j + 1) * kTile), c, mx))
                        : _mm512_setzero_ps();
                sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
                _mm512_store_si512(pp + jp * kTile + 16 * vq, pair_words(p0, p1));
            }
            const __m512 a = exp2_avx512(_mm512_sub_ps(m[vq], mx));
            _mm512_store_ps(alpha + 16 * vq, a);
            l[vq] = _mm512_fmadd_ps(l[vq], a, sum);
            m[vq] = mx;
        }
        tile_product_bf16<Init::scale_rows, true>(oacc, HS, nq, HS, pp, kTile, vp + k0 / 2 * HS, HS,
                                                  npair, alpha, {Band::upper, -shift});
    }

    finish_rows(m, l, nq, lse + (b * s.NH + h) * s.Tq + i0, oacc, HS,
                [&](int64_t i, int64_t d, __mmask16 msk, __m512 o) {
                    lanes::store16(ob + i * s.ldo + d, o, msk);
                });
}

// One (batch, query head), key block by key block, as tiled.hpp's backward_head.
[[gnu::noinline]] void backward_head(float* dq, const KvGrad& g, const uint16_t* dout,
                                     const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                     const uint16_t* out, const float* lse, const AttentionShape& s,
                                     int64_t b, int64_t h, Pair* work) {
    const int64_t HS = s.HS, HP = HS / 2, Tq = s.Tq, Tk = s.Tk, rel = s.q_pos0 - s.k_pos0;
    const float scale = 1.0f / std::sqrt(float(HS));
    const float c = scale * kLog2e;
    const BackwardScratch n(HS, Tq);
    Carve carve(work);
    Pair* kt = carve.pairs(n.kt);
    Pair* vt = carve.pairs(n.vt);
    Pair* kp = carve.pairs(n.kp);
    Pair* pt = carve.pairs(n.pt);
    Pair* dst = carve.pairs(n.dst);
    Pair* dsr = carve.pairs(n.dsr);
    Pair* qd = carve.pairs(n.qd);
    Pair* dod = carve.pairs(n.dod);
    Pair* qp = carve.pairs(n.qp);
    Pair* dop = carve.pairs(n.dop);
    float* pb = carve.floats(n.pb);
    float* dsb = carve.floats(n.dsb);
    float* dkacc = carve.floats(n.dkacc);
    float* dvacc = carve.floats(n.dvacc);
    float* dqd = carve.floats(n.dqd);
    float* Dr = carve.floats(n.Dr);
    float* lse2 = carve.floats(n.lse2);

    const uint16_t* qb = q + b * Tq * s.ldq + h * HS;
    float* dqb = dq + b * Tq * s.ldq + h * HS;
    const int64_t kvh = h / group_size(s);
    const uint16_t* kb = k + b * Tk * s.ldkv + kvh * HS;
    const uint16_t* vb = v + b * Tk * s.ldkv + kvh * HS;
    const uint16_t* dob = dout + b * Tq * s.ldo + h * HS;
    const uint16_t* ob = out + b * Tq * s.ldo + h * HS;
    const float* lseb = lse + (b * s.NH + h) * Tq;

    // Dense copies of the head's Q and dO, in rows and paired over queries: every key block
    // sweeps them again.
    // Both pairings and D are made from the dense copies, which are in cache; O's rows are
    // fetched ahead, 4.5 KiB apart in the fused layout.
    const uint16_t* qdr = reinterpret_cast<const uint16_t*>(qd);
    const uint16_t* dodr = reinterpret_cast<const uint16_t*>(dod);
    copy_rows(reinterpret_cast<uint16_t*>(qd), qb, s.ldq, Tq, HS);
    copy_rows(reinterpret_cast<uint16_t*>(dod), dob, s.ldo, Tq, HS);
    pack_pairs(qp, HS, qdr, HS, Tq, HS);
    pack_pairs(dop, HS, dodr, HS, Tq, HS);
    std::memset(dqd, 0, sizeof(float) * Tq * HS);
    prefetch_rows(ob, s.ldo, std::min(Tq, kAhead), HS);
    for (int64_t i = 0; i < Tq; ++i) {
        if (i + kAhead < Tq) prefetch_rows(ob + (i + kAhead) * s.ldo, s.ldo, 1, HS);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t d = 0; d < HS; d += 16) {
            const __mmask16 m = tail_mask(std::min<int64_t>(16, HS - d));
            acc = _mm512_fmadd_ps(lanes::load16(dodr + i * HS + d, m),
                                  lanes::load16(ob + i * s.ldo + d, m), acc);
        }
        Dr[i] = _mm512_reduce_add_ps(acc);
        lse2[i] = lseb[i] * kLog2e;
    }

    for (int64_t k0 = 0; k0 < Tk; k0 += kTile) {
        const int64_t first = std::max<int64_t>(0, k0 - rel);  // first query seeing key k0
        if (first >= Tq) break;
        const int64_t nk = std::min<int64_t>(kTile, Tk - k0), nkp = (nk + 1) / 2;
        const int64_t nkv = (nk + 15) / 16, width = 16 * nkv;
        pack_pairs_transposed(kt, kb + k0 * s.ldkv, s.ldkv, nk, width, HP);
        pack_pairs_transposed(vt, vb + k0 * s.ldkv, s.ldkv, nk, width, HP);
        pack_pairs(kp, HS, kb + k0 * s.ldkv, s.ldkv, nk, HS);
        std::memset(dkacc, 0, sizeof(float) * nk * HS);
        std::memset(dvacc, 0, sizeof(float) * nk * HS);

        // Query tiles start at even rows, so that they begin on a pair of qp and dop; a row
        // before `first` sees none of these keys and adds zeros.
        for (int64_t i0 = first - first % 2; i0 < Tq; i0 += kTile) {
            const int64_t nq = std::min<int64_t>(kTile, Tq - i0), nqp = (nq + 1) / 2;
            tile_product_bf16<Init::zero, false>(pb, kTile, nq, width, qd + i0 * HP, HP, kt, kTile,
                                                 HP);
            tile_product_bf16<Init::zero, false>(dsb, kTile, nq, width, dod + i0 * HP, HP, vt,
                                                 kTile, HP);
            // P and dS straight into the bf16 layouts their products read: P and dS paired over
            // queries, and dS in rows.
            score_grads(pb, dsb, nq, nkv, rel + i0 - k0, nk, c, scale, lse2 + i0, Dr + i0,
                        [&](int64_t i, int64_t vk, const __m512(&p)[2], const __m512(&ds)[2]) {
                            const int64_t at = i / 2 * kTile + 16 * vk;
                            _mm512_store_si512(pt + at, pair_words(p[0], p[1]));
                            _mm512_store_si512(dst + at, pair_words(ds[0], ds[1]));
                            for (int64_t h = 0; h < std::min<int64_t>(2, nq - i); ++h)
                                _mm256_store_si256(reinterpret_cast<__m256i*>(
                                                       dsr + (i + h) * (kTile / 2) + 8 * vk),
                                                   (__m256i)_mm512_cvtneps_pbh(ds[h]));
                        });
            // Key k0 + j is visible to query i0 + i iff i >= j + shift.
            const int64_t shift = k0 - rel - i0;
            tile_product_bf16<Init::load, true>(dvacc, HS, nk, HS, pt, kTile, dop + i0 / 2 * HS, HS,
                                                nqp, nullptr, {Band::lower, shift});
            tile_product_bf16<Init::load, true>(dkacc, HS, nk, HS, dst, kTile, qp + i0 / 2 * HS, HS,
                                                nqp, nullptr, {Band::lower, shift});
            tile_product_bf16<Init::load, false>(dqd + i0 * HS, HS, nq, HS, dsr, kTile / 2, kp, HS,
                                                 nkp, nullptr, {Band::upper, -shift});
        }
        add_rows<Avx512>(g.dk + k0 * g.ld, g.ld, dkacc, nk, HS);
        add_rows<Avx512>(g.dv + k0 * g.ld, g.ld, dvacc, nk, HS);
    }
    add_rows<Avx512>(dqb, s.ldq, dqd, Tq, HS);
}

}  // namespace

int64_t attention_bf16_avx512_scratch_words(const AttentionShape& s) {
    const int64_t kmax = visible_keys(s, s.Tq - 1);
    return std::max(ForwardScratch(s.HS, kmax).words(), BackwardScratch(s.HS, s.Tq).words());
}

void attention_forward_bf16_avx512(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, const AttentionShape& s) {
    const int64_t HS = s.HS, HP = HS / 2;
    const int64_t kmax = visible_keys(s, s.Tq - 1);
    const int64_t words = attention_bf16_avx512_scratch_words(s);
    const ForwardPlan plan(s, kTile);
#pragma omp parallel if (plan.threads())
    {
        const ForwardScratch n(HS, kmax);
        Carve carve(thread_scratch<Pair>(size_t(words)));
        Pair* qt = carve.pairs(n.qt);
        Pair* pp = carve.pairs(n.pp);
        // The current key/value head's K rows and V paired over keys, grown as blocks need more
        // keys (see tiled.hpp's forward).
        Pair* kd = carve.pairs(n.kd);
        Pair* vp = carve.pairs(n.vp);
        float* oacc = carve.floats(n.oacc);
        float* st = carve.floats(n.st);
        float* alpha = carve.floats(n.alpha);
        plan.run_thread(
            [&](int64_t b, int64_t kvh, int64_t from, int64_t to) {
                const uint16_t* kb = k + b * s.Tk * s.ldkv + kvh * HS;
                const uint16_t* vb = v + b * s.Tk * s.ldkv + kvh * HS;
                copy_rows(reinterpret_cast<uint16_t*>(kd + from * HP), kb + from * s.ldkv, s.ldkv,
                          to - from, HS);
                // From the pair holding the first new key: an odd end was paired with a zero.
                const int64_t p0 = from / 2;
                pack_pairs(vp + p0 * HS, HS, vb + 2 * p0 * s.ldkv, s.ldkv, to - 2 * p0, HS);
            },
            [&](int64_t b, int64_t h, int64_t i0) {
                forward_block(out, lse, q, s, b, h, i0, kd, vp, qt, pp, oacc, st, alpha);
            });
    }
}

void attention_backward_bf16_avx512(float* dq, float* dk, float* dv, const uint16_t* dout,
                                    const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const uint16_t* out, const float* lse,
                                    const AttentionShape& s) {
    const int64_t words = attention_bf16_avx512_scratch_words(s);
    BackwardPlan(dk, dv, s).run([&] { return thread_scratch<Pair>(size_t(words)); },
                                [&](Pair* work, int64_t b, int64_t h, const KvGrad& g) {
                                    backward_head(dq, g, dout, q, k, v, out, lse, s, b, h, work);
                                });
}

}  // namespace weft::kernels::detail

#endif  // __AVX512BF16__ && __AVX512BW__
