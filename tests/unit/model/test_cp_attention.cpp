// CpAttention (ring, TokenRing and Ulysses) against the whole-sequence kernel in one process: cp
// ranks run as threads over an in-process CpComm, each with its zigzag rows of random q, k, v (GQA:
// 4 heads sharing 2 kv heads); outputs and gradients must match the kernel's at those positions.
// Two micro-batches run in a pipeline's order (forward, forward, backward, backward), so what
// Ulysses keeps from a forward must reach its own backward, and it keeps what the activation
// count (LayerSpan::ulysses_kept) says; Ulysses makes four all-to-alls in each direction per
// call. The hybrid (Ulysses in groups of U, the ring across them) runs the same checks at its
// own positions. The ring and TokenRing send the floats docs/context_parallel.md counts, and
// every region allocates the scratch CpAttention::scratch_floats (the memory estimates) says;
// Ulysses' all-to-all volume per rank stays constant when T and cp grow together. With packed
// documents every region matches the varlen kernel on the whole rows (fp32 and bf16), and the
// ring, TokenRing, Ulysses and the hybrid on the per-document zigzag (data::doc_zigzag) match it
// too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/data/doc_zigzag.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/varlen.hpp"
#include "weft/kernels/attention/zigzag.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/model.hpp"

namespace weft::model {
namespace {

// One rendezvous per operation: every rank publishes its send buffer, reads its peers', and
// waits until all have read before any buffer is reused.
class ThreadCp {
  public:
    explicit ThreadCp(int size) : size_(size), bar_(size), sent_(size_t(size)) {}
    class Comm : public CpComm {
      public:
        Comm(ThreadCp& g, int rank) : g_(g), rank_(rank) {}
        int rank() const override { return rank_; }
        int size() const override { return g_.size_; }
        void start_shift(const float* send, float* recv, int64_t n) override {
            shifted += n;
            exchange(send, recv, n, g_.size_ - 1);
        }
        void start_shift(const uint16_t* send, uint16_t* recv, int64_t n) override {
            shifted16 += n;
            exchange(send, recv, n, g_.size_ - 1);
        }
        void wait_shift() override {}
        void start_return(const float* send, float* recv, int64_t n, int hops) override {
            returned += n;
            exchange(send, recv, n, hops);
        }
        void wait_return() override {}
        void all_to_all(const float* in, float* out, int64_t n) override {
            ++all_to_alls;
            a2a_local += n * g_.size_;
            a2a_sent += n * (g_.size_ - 1);  // the block to itself stays
            scatter(in, out, n);
        }
        void all_to_all(const uint16_t* in, uint16_t* out, int64_t n) override {
            ++all_to_alls;
            a2a_local16 += n * g_.size_;
            scatter(in, out, n);
        }

        int all_to_alls = 0;
        int64_t shifted = 0, returned = 0;       // floats sent each way
        int64_t shifted16 = 0, a2a_local16 = 0;  // bf16 values shifted, given to all-to-alls
        int64_t a2a_local = 0, a2a_sent = 0;     // floats given to all-to-alls, and sent to others

      private:
        template <class T>
        void scatter(const T* in, T* out, int64_t n) {
            g_.sent_[size_t(rank_)] = in;
            g_.bar_.arrive_and_wait();
            for (int j = 0; j < g_.size_; ++j)
                std::copy_n(static_cast<const T*>(g_.sent_[size_t(j)]) + rank_ * n, n, out + j * n);
            g_.bar_.arrive_and_wait();
        }
        // Every rank sends `send`; this one receives rank + `from`'s (mod size).
        template <class T>
        void exchange(const T* send, T* recv, int64_t n, int from) {
            g_.sent_[size_t(rank_)] = send;
            g_.bar_.arrive_and_wait();
            std::copy_n(static_cast<const T*>(g_.sent_[size_t((rank_ + from) % g_.size_)]), n,
                        recv);
            g_.bar_.arrive_and_wait();
        }

        ThreadCp& g_;
        int rank_;
    };

  private:
    int size_;
    std::barrier<> bar_;
    std::vector<const void*> sent_;
};

// The in-process groups of cp ranks: one (ring, TokenRing, Ulysses) or, for the hybrid with
// Ulysses groups of U < cp, those groups and the rings across them: rank g·U + u is rank u of
// Ulysses group g and rank g of ring u.
struct Groups {
    Groups(int cp, int ulysses)
        : hybrid(ulysses > 0 && ulysses < cp), U(ulysses > 0 ? ulysses : cp) {
        for (int g = 0; g < (hybrid ? cp / U : 1); ++g)
            groups.push_back(std::make_unique<ThreadCp>(hybrid ? U : cp));
        for (int u = 0; hybrid && u < U; ++u) rings.push_back(std::make_unique<ThreadCp>(cp / U));
    }
    ThreadCp& group(int r) { return *groups[hybrid ? size_t(r / U) : 0]; }
    int group_rank(int r) const { return hybrid ? r % U : r; }
    std::unique_ptr<ThreadCp::Comm> ring(int r) {
        if (!hybrid) return nullptr;
        return std::make_unique<ThreadCp::Comm>(*rings[size_t(r % U)], r / U);
    }

    bool hybrid;
    int U;
    std::vector<std::unique_ptr<ThreadCp>> groups, rings;
};

std::vector<float> random(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
}

// One micro-batch: random q, k, v, dout and the whole-sequence kernel's out, dq, dk, dv.
struct Case {
    std::vector<float> q, k, v, dout, out, dq, dk, dv;
};

constexpr int64_t B = 2, T = 32, NH = 4, NKV = 2, HS = 8, A = NH * HS, KV = NKV * HS;

// Packed rows: documents of 3, 1, 9, 14 and 5 (crossing the chunk edges at cp 2 and 4), then 1
// and 31 (spanning every chunk).
const std::vector<int64_t> kDocs{0, 3, 4, 13, 27, 32, 33, 64};

// A rank's rows (at `pos` of each sequence) of a [B, T, w] tensor.
template <class V>
V local_rows(const V& x, int64_t w, const std::vector<int64_t>& pos) {
    const int64_t Tl = int64_t(pos.size());
    V l(size_t(B * Tl * w));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < Tl; ++t)
            std::copy_n(x.data() + (b * T + pos[size_t(t)]) * w, w, l.data() + (b * Tl + t) * w);
    return l;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = kernels::fp32_to_bf16(x[i]);
    return r;
}

// `cu`: packed documents (the varlen kernel), or none. `bf16` (packed only): q, k, v and dout
// rounded to bf16 and the bf16 varlen kernel, its output widened.
Case reference_case(uint32_t seed, std::span<const int64_t> cu, bool bf16 = false) {
    auto input = [&](int64_t n, uint32_t at) {
        std::vector<float> x = random(n, at);
        for (float& e : x) e = bf16 ? kernels::bf16_to_fp32(kernels::fp32_to_bf16(e)) : e;
        return x;
    };
    Case c{input(B * T * A, seed),
           input(B * T * KV, seed + 1),
           input(B * T * KV, seed + 2),
           input(B * T * A, seed + 3),
           {},
           {},
           {},
           {}};
    const kernels::AttentionShape full{B, T, T, NH, HS, A, KV, A, 0, NKV, 0};
    std::vector<float> lse(size_t(B * NH * T));
    c.out.resize(c.q.size());
    c.dq.resize(c.q.size());
    c.dk.resize(c.k.size());
    c.dv.resize(c.v.size());
    if (bf16) {
        const auto q = to_bf16(c.q), k = to_bf16(c.k), v = to_bf16(c.v), d = to_bf16(c.dout);
        std::vector<uint16_t> o(q.size());
        kernels::attention_forward_varlen_bf16(o.data(), lse.data(), q.data(), k.data(), v.data(),
                                               full, cu);
        kernels::attention_backward_varlen_bf16(c.dq.data(), c.dk.data(), c.dv.data(), d.data(),
                                                q.data(), k.data(), v.data(), o.data(), lse.data(),
                                                full, cu);
        for (size_t i = 0; i < o.size(); ++i) c.out[i] = kernels::bf16_to_fp32(o[i]);
    } else if (cu.empty()) {
        kernels::attention_forward(c.out.data(), lse.data(), c.q.data(), c.k.data(), c.v.data(),
                                   full);
        kernels::attention_backward(c.dq.data(), c.dk.data(), c.dv.data(), c.dout.data(),
                                    c.q.data(), c.k.data(), c.v.data(), c.out.data(), lse.data(),
                                    full);
    } else {
        kernels::attention_forward_varlen(c.out.data(), lse.data(), c.q.data(), c.k.data(),
                                          c.v.data(), full, cu);
        kernels::attention_backward_varlen(c.dq.data(), c.dk.data(), c.dv.data(), c.dout.data(),
                                           c.q.data(), c.k.data(), c.v.data(), c.out.data(),
                                           lse.data(), full, cu);
    }
    return c;
}

// Rank r's rows of ref's q, k, v and dout under a per-document layout: rows[b][r][t] is the
// whole rows' position its local row t holds, or -1 for padding, which gets garbage; out (of
// ones, for the region to overwrite), dq, dk and dv sized.
Case piece_inputs(const Case& ref, const std::vector<std::vector<std::vector<int64_t>>>& rows,
                  int r) {
    const int64_t Tl = int64_t(rows[0][size_t(r)].size());
    const std::vector<float> junk = random(B * Tl * A, uint32_t(100 + r));
    auto local = [&](const std::vector<float>& x, int64_t w) {
        std::vector<float> l(size_t(B * Tl * w));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < Tl; ++t) {
                const int64_t at = rows[size_t(b)][size_t(r)][size_t(t)];
                const float* from = at >= 0 ? x.data() + at * w : junk.data() + t * w;
                std::copy_n(from, w, l.data() + (b * Tl + t) * w);
            }
        return l;
    };
    Case c{local(ref.q, A), local(ref.k, KV), local(ref.v, KV), local(ref.dout, A), {}, {}, {}, {}};
    c.out.assign(c.q.size(), 1.0f);
    c.dq.resize(c.q.size());
    c.dk.resize(c.k.size());
    c.dv.resize(c.v.size());
    return c;
}

// What the activation count says Ulysses keeps for one layer of one micro-batch of B sequences
// of Tl local rows: the shared part with the count minus without it.
int64_t ulysses_kept_floats(int64_t Tl) {
    ModelConfig cfg;
    cfg.n_layer = 1, cfg.n_head = NH, cfg.n_kv_head = NKV, cfg.n_embd = A, cfg.n_positions = T;
    LayerSpan with{0, -1, false, false};
    with.ulysses_kept = true;
    return Activations::shared_floats(cfg, B, Tl, with) -
           Activations::shared_floats(cfg, B, Tl, {0, -1, false, false});
}

// cp ranks; `ulysses` 0: the ring, cp: Ulysses, U < cp: the hybrid with Ulysses groups of U;
// `bidirectional`: the ring as TokenRing; `cu`: packed documents over the whole rows.
void check_against_kernel(int cp, int ulysses, bool bidirectional = false,
                          std::span<const int64_t> cu = {}) {
    constexpr int kMicro = 2;
    std::vector<Case> ref;
    for (int m = 0; m < kMicro; ++m) ref.push_back(reference_case(uint32_t(1 + 4 * m), cu));

    Groups net(cp, ulysses);
    const bool hybrid = net.hybrid;
    const int U = net.U;
    const int64_t Tl = T / cp;
    // got[rank][micro]: this rank's rows of out, dq, dk, dv.
    std::vector<std::vector<Case>> got(static_cast<size_t>(cp), std::vector<Case>(kMicro));
    std::vector<std::vector<int>> a2a(static_cast<size_t>(cp));
    std::vector<int64_t> shifted(static_cast<size_t>(cp)), returned(static_cast<size_t>(cp));
    std::vector<int64_t> scratch(static_cast<size_t>(cp)), predicted(static_cast<size_t>(cp));
    std::vector<std::vector<int64_t>> positions(static_cast<size_t>(cp)),
        kept(static_cast<size_t>(cp));
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r) {
        threads.emplace_back([&, r] {
            ThreadCp::Comm comm(net.group(r), net.group_rank(r));
            const std::unique_ptr<ThreadCp::Comm> ring = net.ring(r);
            CpAttention att(comm, T, ulysses > 0, ring.get(), bidirectional);
            EXPECT_EQ(att.rank(), r);
            EXPECT_EQ(att.size(), cp);
            const std::vector<int64_t> pos = att.positions();
            positions[size_t(r)] = pos;
            auto local = [&](const auto& x, int64_t w) { return local_rows(x, w, pos); };
            const CpAttentionShape s{B, Tl, NH, NKV, HS, A, KV, A, cu};
            std::vector<Case> in(kMicro);
            std::vector<std::vector<float>> lse(kMicro, std::vector<float>(size_t(B * NH * Tl)));
            for (int m = 0; m < kMicro; ++m) {
                Case& c = in[size_t(m)];
                c.q = local(ref[size_t(m)].q, A);
                c.k = local(ref[size_t(m)].k, KV);
                c.v = local(ref[size_t(m)].v, KV);
                c.dout = local(ref[size_t(m)].dout, A);
                Case& g = got[size_t(r)][size_t(m)];
                g.out.resize(c.q.size());
                att.forward(g.out.data(), lse[size_t(m)].data(), c.q.data(), c.k.data(), c.v.data(),
                            s);
                a2a[size_t(r)].push_back(comm.all_to_alls);
                kept[size_t(r)].push_back(att.kept_floats());
            }
            for (int m = 0; m < kMicro; ++m) {
                const Case& c = in[size_t(m)];
                Case& g = got[size_t(r)][size_t(m)];
                g.dq.resize(c.q.size());
                g.dk.resize(c.k.size());
                g.dv.resize(c.v.size());
                att.backward(g.dq.data(), g.dk.data(), g.dv.data(), c.dout.data(), c.q.data(),
                             c.k.data(), c.v.data(), g.out.data(), lse[size_t(m)].data(), s);
                a2a[size_t(r)].push_back(comm.all_to_alls);
                kept[size_t(r)].push_back(att.kept_floats());
            }
            scratch[size_t(r)] = att.allocated_scratch_floats();
            predicted[size_t(r)] =
                CpAttention::scratch_floats(att.region(), B, Tl, NH, NKV, HS, hybrid ? U : 1);
            shifted[size_t(r)] = comm.shifted;
            returned[size_t(r)] = comm.returned;
        });
    }
    for (std::thread& t : threads) t.join();
    // The ranks' positions cover the sequence once.
    std::vector<int> seen(size_t(T), 0);
    for (const auto& p : positions)
        for (int64_t x : p) ++seen[size_t(x)];
    EXPECT_EQ(seen, std::vector<int>(size_t(T), 1));
    for (int r = 0; r < cp; ++r) {
        const std::vector<int64_t>& pos = positions[size_t(r)];
        auto expect = [&](const std::vector<float>& want, const std::vector<float>& have, int64_t w,
                          const char* what, int m) {
            for (int64_t b = 0; b < B; ++b)
                for (int64_t t = 0; t < Tl; ++t)
                    for (int64_t j = 0; j < w; ++j)
                        ASSERT_NEAR(have[size_t((b * Tl + t) * w + j)],
                                    want[size_t((b * T + pos[size_t(t)]) * w + j)], 2e-5)
                            << what << " micro-batch " << m << " rank " << r << " b " << b << " t "
                            << t;
        };
        for (int m = 0; m < kMicro; ++m) {
            const Case &want = ref[size_t(m)], &have = got[size_t(r)][size_t(m)];
            expect(want.out, have.out, A, "out", m);
            expect(want.dq, have.dq, A, "dq", m);
            expect(want.dk, have.dk, KV, "dk", m);
            expect(want.dv, have.dv, KV, "dv", m);
        }
        // Cumulative after each call: forwards then backwards, four all-to-alls each (q, k, v,
        // out; dout, dq, dk, dv); the ring makes none.
        const std::vector<int> want =
            ulysses ? std::vector<int>{4, 8, 12, 16} : std::vector<int>{0, 0, 0, 0};
        EXPECT_EQ(a2a[size_t(r)], want) << "all-to-alls of rank " << r;
        // Kept after each call: one micro-batch's layer, two, one, none.
        const int64_t layer = ulysses ? ulysses_kept_floats(Tl) : 0;
        EXPECT_EQ(kept[size_t(r)], (std::vector<int64_t>{layer, 2 * layer, layer, 0}))
            << "floats kept by rank " << r;
        // Floats each way over both micro-batches (docs/context_parallel.md), per micro-batch:
        // the ring shifts 2·B·Tl·KV cp-1 times forward, and K/V plus dK/dV cp-1 and cp times
        // backward; TokenRing shifts queries (B·Tl·A) forward and queries, dO, out and lse
        // (B·Tl·(3A + NH)) backward, cp-1 times each, and returns (out, lse) forward and dQ
        // backward cp-1 times.
        // The memory estimates' count of the region's scratch is what it allocated.
        EXPECT_EQ(scratch[size_t(r)], predicted[size_t(r)]) << "scratch floats of rank " << r;
        if (ulysses) continue;
        const int64_t rows = B * Tl, steps = cp - 1;
        const int64_t shift = bidirectional
                                  ? steps * rows * (A + 3 * A + NH)
                                  : steps * 2 * rows * KV + (2 * steps + 1) * 2 * rows * KV;
        const int64_t back = bidirectional ? steps * (rows * (A + NH) + rows * A) : 0;
        EXPECT_EQ(shifted[size_t(r)], kMicro * shift) << "floats shifted by rank " << r;
        EXPECT_EQ(returned[size_t(r)], kMicro * back) << "floats returned to rank " << r;
    }
}

TEST(CpAttention, RingMatchesTheWholeSequenceKernel) {
    check_against_kernel(2, 0);
    check_against_kernel(4, 0);
}

TEST(CpAttention, TokenRingMatchesTheWholeSequenceKernel) {
    check_against_kernel(2, 0, true);
    check_against_kernel(4, 0, true);
}

TEST(CpAttention, UlyssesMatchesTheWholeSequenceKernel) {
    check_against_kernel(2, 2);
}

// USP: cp 4 as Ulysses over pairs of ranks and a ring over the two pairs.
TEST(CpAttention, HybridMatchesTheWholeSequenceKernel) {
    check_against_kernel(4, 2);
}

// --dtype bf16's regions (forward and backward on uint16_t) against the whole-sequence bf16 kernel
// on the same bf16 q, k, v and dout. The ring's (and TokenRing's, and the hybrid's) pairs each
// round their output to bf16 before the fp32 merge and round P and dS per tile, so they differ
// from the one call by a few bf16 roundings: at most 7.8e-3 on out and 9.6e-3 on the gradients
// measured (values of order 1), bounded at 2e-2 and 4e-2. Ulysses runs the same kernel on the same
// whole sequence of its heads: its out is the kernel's bits and its gradients match to fp32
// rounding. The ring shifts K/V as bf16 and dK/dV as fp32; Ulysses trades q, k, v, out and dout as
// bf16 and keeps q, k, v, out as bf16 (half the floats the activation count gives under fp32, as it
// says under bf16); TokenRing sends its queries (with dO and out in backward) as bf16 and its
// partial results back in fp32; every region's scratch is what scratch_floats counts for bf16.
// `ulysses`, `bidirectional` and `cu` as for check_against_kernel.
void check_bf16(int cp, int ulysses, bool bidirectional = false, std::span<const int64_t> cu = {}) {
    auto bf16 = [](const std::vector<float>& x) {
        std::vector<uint16_t> r(x.size());
        for (size_t i = 0; i < x.size(); ++i) r[i] = kernels::fp32_to_bf16(x[i]);
        return r;
    };
    const std::vector<uint16_t> q = bf16(random(B * T * A, 21)), k = bf16(random(B * T * KV, 22)),
                                v = bf16(random(B * T * KV, 23)),
                                dout = bf16(random(B * T * A, 24));
    const kernels::AttentionShape full{B, T, T, NH, HS, A, KV, A, 0, NKV, 0};
    std::vector<uint16_t> out16(q.size());
    std::vector<float> lse(size_t(B * NH * T)), dq(q.size()), dk(k.size()), dv(v.size());
    if (cu.empty()) {
        kernels::attention_forward_bf16(out16.data(), lse.data(), q.data(), k.data(), v.data(),
                                        full);
        kernels::attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                         k.data(), v.data(), out16.data(), lse.data(), full);
    } else {
        kernels::attention_forward_varlen_bf16(out16.data(), lse.data(), q.data(), k.data(),
                                               v.data(), full, cu);
        kernels::attention_backward_varlen_bf16(dq.data(), dk.data(), dv.data(), dout.data(),
                                                q.data(), k.data(), v.data(), out16.data(),
                                                lse.data(), full, cu);
    }
    std::vector<float> out(out16.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::bf16_to_fp32(out16[i]);

    Groups net(cp, ulysses);
    const bool hybrid = net.hybrid;
    const int U = net.U;
    const int64_t Tl = T / cp, rows = B * Tl, steps = cp - 1;
    const double tol_out = ulysses == cp ? 0 : 2e-2, tol_grad = ulysses == cp ? 1e-5 : 4e-2;
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r)
        threads.emplace_back([&, r] {
            ThreadCp::Comm comm(net.group(r), net.group_rank(r));
            const std::unique_ptr<ThreadCp::Comm> ring = net.ring(r);
            CpAttention att(comm, T, ulysses > 0, ring.get(), bidirectional);
            const std::vector<int64_t> pos = att.positions();
            auto local = [&](const auto& x, int64_t w) { return local_rows(x, w, pos); };
            const CpAttentionShape s{B, Tl, NH, NKV, HS, A, KV, A, cu};
            const auto lq = local(q, A), lk = local(k, KV), lv = local(v, KV), ldo = local(dout, A);
            std::vector<float> o(lq.size()), l(size_t(B * NH * Tl)), gq(lq.size()), gk(lk.size()),
                gv(lv.size());
            att.forward(o.data(), l.data(), lq.data(), lk.data(), lv.data(), s);
            const int64_t kept = att.kept_floats();
            const std::vector<uint16_t> o16 = bf16(o);  // as the model keeps it
            att.backward(gq.data(), gk.data(), gv.data(), ldo.data(), lq.data(), lk.data(),
                         lv.data(), o16.data(), l.data(), s);
            auto expect = [&](const std::vector<float>& want, const std::vector<float>& have,
                              double tol, const char* what) {
                const std::vector<float> w = local(want, int64_t(have.size()) / rows);
                double worst = 0;
                for (size_t i = 0; i < have.size(); ++i)
                    worst = std::max(worst, double(std::abs(have[i] - w[i])));
                EXPECT_LE(worst, tol) << what << " at cp " << cp << " rank " << r;
            };
            expect(out, o, tol_out, "out");
            expect(dq, gq, tol_grad, "dq");
            expect(dk, gk, tol_grad, "dk");
            expect(dv, gv, tol_grad, "dv");
            if (bidirectional) {
                // Forward the queries; backward queries, dO and out, then the lse's floats from
                // a 4-byte boundary (two values each). Back: (out, lse) forward, dQ backward.
                const int64_t nq = rows * A, nlse = rows * NH;
                EXPECT_EQ(comm.shifted16, steps * (nq + (3 * nq + 1) / 2 * 2 + 2 * nlse))
                    << "bf16 blocks, rank " << r;
                EXPECT_EQ(comm.shifted, 0) << "rank " << r;
                EXPECT_EQ(comm.returned, steps * (2 * nq + nlse)) << "fp32 partials, rank " << r;
            } else if (ulysses == 0) {
                EXPECT_EQ(comm.shifted16, 2 * steps * 2 * rows * KV) << "bf16 K/V, rank " << r;
                EXPECT_EQ(comm.shifted, cp * 2 * rows * KV) << "fp32 dK/dV, rank " << r;
            } else {
                // Forward q, k, v, out and backward dout in bf16; dq, dk, dv in fp32.
                EXPECT_EQ(comm.a2a_local16, rows * (2 * A + 2 * KV) + rows * A) << "rank " << r;
                EXPECT_EQ(comm.a2a_local, rows * (A + 2 * KV)) << "rank " << r;
                LayerSpan span{0, -1, false, false};
                span.ulysses_kept = span.bf16 = true;
                ModelConfig cfg;
                cfg.n_layer = 1, cfg.n_head = NH, cfg.n_kv_head = NKV, cfg.n_embd = A;
                cfg.n_positions = T;
                LayerSpan plain{0, -1, false, false};
                plain.bf16 = true;
                EXPECT_EQ(kept, Activations::shared_floats(cfg, B, Tl, span) -
                                    Activations::shared_floats(cfg, B, Tl, plain))
                    << "rank " << r;
                EXPECT_EQ(2 * kept, ulysses_kept_floats(Tl)) << "rank " << r;
            }
            EXPECT_EQ(
                att.allocated_scratch_floats(),
                CpAttention::scratch_floats(att.region(), B, Tl, NH, NKV, HS, hybrid ? U : 1, true))
                << "rank " << r;
        });
    for (std::thread& t : threads) t.join();
}

TEST(CpAttention, Bf16RegionsMatchTheWholeSequenceBf16Kernel) {
    check_bf16(2, 0);  // ring
    check_bf16(4, 0);
    check_bf16(2, 2);        // Ulysses
    check_bf16(4, 2);        // the hybrid
    check_bf16(2, 0, true);  // TokenRing
    check_bf16(4, 0, true);
}

// Packed documents: the rings keep the rows' zigzag split and mask each block by document, Ulysses
// runs the varlen kernel on whole rows; every region's outputs and gradients are the varlen
// kernel's on the whole rows (fp32 within 2e-5; bf16 within the bounds above), with the same
// floats sent as unpacked (checked inside) and blocks no document spans skipped.
TEST(CpAttention, PackedDocumentsMatchTheVarlenKernel) {
    check_against_kernel(2, 0, false, kDocs);  // ring
    check_against_kernel(4, 0, false, kDocs);
    check_against_kernel(2, 0, true, kDocs);  // TokenRing
    check_against_kernel(4, 0, true, kDocs);
    check_against_kernel(2, 2, false, kDocs);  // Ulysses
    check_against_kernel(4, 2, false, kDocs);  // the hybrid
    check_bf16(4, 0, false, kDocs);
    check_bf16(4, 0, true, kDocs);
    check_bf16(4, 2, false, kDocs);
}

// Row 0's last document (5 tokens at 27) stays out of the per-document layouts, as a row's
// padding does in training, so that the ranks' rows end in padding.
constexpr int64_t kUnlaid = 27;

// kDocs' documents of row b (but kUnlaid) laid out over R ranks, fit to T / R rows.
data::DocZigzag fitted_row(int64_t b, int R) {
    std::vector<data::Segment> docs;
    for (size_t d = 0; d + 1 < kDocs.size(); ++d)
        if (kDocs[d] >= b * T && kDocs[d] < (b + 1) * T && kDocs[d] != kUnlaid)
            docs.push_back({kDocs[d], kDocs[d + 1] - kDocs[d]});
    data::DocZigzag z = data::doc_zigzag(docs, R, data::split_above(T, R));
    data::fit_rows(z, T / R);
    return z;
}

// The whole rows' position each of layout rank g's rows holds (-1: padding); `split` counts
// its pieces that do not start a document.
std::vector<int64_t> layout_rows(const data::DocZigzag& z, int g, int64_t& split) {
    std::vector<int64_t> rows;
    for (const data::DocPiece& p : z.ranks[size_t(g)]) {
        split += p.pos0 > 0;
        for (int64_t i = 0; i < p.seg.len; ++i)
            rows.push_back(p.seg.first < 0 ? -1 : p.seg.first + i);
    }
    return rows;
}

// Layout rank g's calls with each rank k (data::doc_blocks), one list a rank, onto `to`: g's
// queries against k's keys, or with `token_ring` k's queries (they travel to g) against g's keys.
void append_calls(const data::DocZigzag& z, int g, std::vector<std::vector<CpDocBlock>>& to,
                  bool token_ring = false) {
    for (int k = 0; k < z.ring; ++k) {
        std::vector<CpDocBlock>& calls = to.emplace_back();
        const int q_rank = token_ring ? k : g, k_rank = token_ring ? g : k;
        for (const data::DocBlock& d : data::doc_blocks(z, q_rank, k_rank))
            calls.push_back({d.q_row, d.k_row, d.Tq, d.Tk, d.q_pos0, d.k_pos0});
    }
}

// Each rank r's out, dq, dk, dv at its local rows against ref's at the whole rows' positions
// rows[b][r][t] (tolerances tol_out and tol_grad). Padding rows (-1) must be zero, or with
// `padding_finite` (Ulysses: a document of its own) only finite. `what` names the case.
void expect_layout_rows(const Case& ref, const std::vector<Case>& got,
                        const std::vector<std::vector<std::vector<int64_t>>>& rows, double tol_out,
                        double tol_grad, bool padding_finite, const std::string& what) {
    const int64_t Tl = int64_t(rows[0][0].size());
    for (size_t r = 0; r < got.size(); ++r)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < Tl; ++t) {
                const int64_t at = rows[size_t(b)][r][size_t(t)];
                auto expect = [&](const std::vector<float>& want, const std::vector<float>& have,
                                  int64_t w, double tol, const char* name) {
                    for (int64_t j = 0; j < w; ++j) {
                        const float x = have[size_t((b * Tl + t) * w + j)];
                        if (at < 0 && padding_finite) {
                            ASSERT_TRUE(std::isfinite(x)) << name << " padding, rank " << r;
                            continue;
                        }
                        ASSERT_NEAR(x, at >= 0 ? want[size_t(at * w + j)] : 0.0f, tol)
                            << name << " " << what << " rank " << r << " b " << b << " t " << t
                            << (at < 0 ? " (padding)" : "");
                    }
                };
                const Case& g = got[r];
                expect(ref.out, g.out, A, tol_out, "out");
                expect(ref.dq, g.dq, A, tol_grad, "dq");
                expect(ref.dk, g.dk, KV, tol_grad, "dk");
                expect(ref.dv, g.dv, KV, tol_grad, "dv");
            }
}

// The per-document zigzag under the ring and TokenRing: each rank holds its pieces of kDocs'
// documents (the long ones cut in 2·cp pieces, the short ones whole) fit to T / cp rows
// (data::fit_rows), and runs the layout's blocks (data::doc_blocks): the ring its queries against
// each rank's keys, TokenRing each rank's (travelling) queries against its keys. Its outputs and
// gradients at its tokens are the varlen kernel's on the whole rows (fp32 within 2e-5; bf16: the
// bf16 varlen kernel's, within check_bf16's bounds); padding rows, filled with garbage, get a
// zero output and zero gradients and change no real one; TokenRing sends what it sends on the
// rows' zigzag; the region allocates the scratch its count says.
void check_doc_zigzag_ring(int cp, bool bidirectional = false, bool bf16 = false) {
    const Case ref = reference_case(5, kDocs, bf16);
    // rows[b][r][t]: which of the whole rows' B*T positions rank r's local row t holds (-1:
    // padding); blocks[r][b * cp + k]: rank r's calls with rank k in row b (the ring: r's
    // queries against k's keys; TokenRing: k's queries against r's keys).
    std::vector<std::vector<std::vector<int64_t>>> rows(static_cast<size_t>(B));
    std::vector<std::vector<std::vector<CpDocBlock>>> blocks(static_cast<size_t>(cp));
    const int64_t Tl = T / cp;
    int64_t split = 0;
    for (int64_t b = 0; b < B; ++b) {
        const data::DocZigzag z = fitted_row(b, cp);
        for (int r = 0; r < cp; ++r) {
            rows[size_t(b)].push_back(layout_rows(z, r, split));
            append_calls(z, r, blocks[size_t(r)], bidirectional);
        }
    }
    ASSERT_GT(split, 0) << "no document is split at cp " << cp;
    // Every laid out token on exactly one rank, in T / cp rows each.
    std::vector<int> seen(size_t(B * T), 0), want(size_t(B * T), 1);
    std::fill_n(want.begin() + kUnlaid, 5, 0);
    for (const auto& row : rows)
        for (const auto& mine : row) {
            EXPECT_EQ(int64_t(mine.size()), Tl);
            for (int64_t x : mine)
                if (x >= 0) ++seen[size_t(x)];
        }
    EXPECT_EQ(seen, want);

    ThreadCp net(cp);
    std::vector<Case> got(static_cast<size_t>(cp));
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r)
        threads.emplace_back([&, r] {
            ThreadCp::Comm comm(net, r);
            CpAttention att(comm, T, false, nullptr, bidirectional);
            Case& g = got[size_t(r)];
            g = piece_inputs(ref, rows, r);
            const std::vector<float>&q = g.q, &k = g.k, &v = g.v, &dout = g.dout;
            CpAttentionShape s{B, Tl, NH, NKV, HS, A, KV, A};
            s.doc_blocks = blocks[size_t(r)];
            std::vector<float> lse(size_t(B * NH * Tl));
            if (bf16) {
                const auto q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v);
                att.forward(g.out.data(), lse.data(), q16.data(), k16.data(), v16.data(), s);
                att.backward(g.dq.data(), g.dk.data(), g.dv.data(), to_bf16(dout).data(),
                             q16.data(), k16.data(), v16.data(), to_bf16(g.out).data(), lse.data(),
                             s);
            } else {
                att.forward(g.out.data(), lse.data(), q.data(), k.data(), v.data(), s);
                att.backward(g.dq.data(), g.dk.data(), g.dv.data(), dout.data(), q.data(), k.data(),
                             v.data(), g.out.data(), lse.data(), s);
            }
            if (bidirectional && !bf16) {  // as on the rows' zigzag (check_against_kernel)
                const int64_t nq = B * Tl * A, nlse = B * Tl * NH;
                EXPECT_EQ(comm.shifted, (cp - 1) * (4 * nq + nlse)) << "rank " << r;
                EXPECT_EQ(comm.returned, (cp - 1) * (2 * nq + nlse)) << "rank " << r;
            }
            EXPECT_EQ(att.allocated_scratch_floats(),
                      CpAttention::scratch_floats(att.region(), B, Tl, NH, NKV, HS, 1, bf16))
                << "scratch floats of rank " << r;
        });
    for (std::thread& t : threads) t.join();
    const double tol_out = bf16 ? 2e-2 : 2e-5, tol_grad = bf16 ? 4e-2 : 2e-5;
    expect_layout_rows(
        ref, got, rows, tol_out, tol_grad, false,
        fmt::format("cp {}{}{}", cp, bidirectional ? " TokenRing" : " ring", bf16 ? " bf16" : ""));
}

TEST(CpAttention, PerDocumentZigzagRingMatchesTheVarlenKernel) {
    check_doc_zigzag_ring(2);
    check_doc_zigzag_ring(4);
    check_doc_zigzag_ring(4, false, true);  // bf16
}

TEST(CpAttention, PerDocumentZigzagTokenRingMatchesTheVarlenKernel) {
    check_doc_zigzag_ring(2, true);
    check_doc_zigzag_ring(4, true);
    check_doc_zigzag_ring(4, true, true);  // bf16
}

// The per-document zigzag under Ulysses (`ulysses` == cp) and the hybrid (Ulysses groups of
// U < cp, a ring over the G = cp / U groups): kDocs laid out over the layout's ranks (every cp
// rank under Ulysses, the groups under the hybrid) and fit to T / R rows (data::fit_rows), row
// 0's last document left out so that rows end in padding, filled with garbage. Ulysses gathers
// each rank's rows in document order (data::doc_order) and runs the varlen kernel; the hybrid's
// rank u holds the u-th 1/U of each half of its group's rows, Ulysses gathers them and the ring
// runs the group's calls (data::doc_blocks). At every real token out, dq, dk, dv are the varlen
// kernel's on the whole rows: within 2e-5 in fp32; in bf16 against the bf16 varlen kernel on
// the same rounded inputs, Ulysses' out bit for bit (each document is its own kernel call
// either way) and its gradients within 1e-5, the hybrid within the bounds of check_bf16. The
// hybrid's padding rows get zero (the ring gives them no keys), Ulysses' are a document of
// their own: finite; the scratch is what scratch_floats counts.
void check_doc_zigzag_ulysses(int cp, int ulysses, bool bf16) {
    const bool hybrid = ulysses < cp;
    const int U = hybrid ? ulysses : 1, R = cp / U;
    const int64_t Tl = T / cp, half = T / (2 * R), sub = half / U;
    // The reference: the varlen kernel on the whole rows (bf16: on the rounded inputs).
    const Case ref = reference_case(31, kDocs, bf16);
    // rows[b][r][t]: the whole rows' position cp rank r's local row t holds (-1: padding);
    // blocks[g][b * R + k]: group g's calls against group k's keys (the hybrid); order: the
    // gather's slots and documents (Ulysses).
    std::vector<std::vector<std::vector<int64_t>>> rows(static_cast<size_t>(B));
    std::vector<std::vector<std::vector<CpDocBlock>>> blocks(static_cast<size_t>(R));
    CpDocOrder order;
    int64_t split = 0;
    for (int64_t b = 0; b < B; ++b) {
        const data::DocZigzag z = fitted_row(b, R);
        for (int r = 0; r < cp; ++r) {
            const std::vector<int64_t> group = layout_rows(z, r / U, split);
            std::vector<int64_t>& mine = rows[size_t(b)].emplace_back();
            for (int64_t t = 0; t < Tl; ++t)
                mine.push_back(group[size_t(t / sub * half + r % U * sub + t % sub)]);
        }
        if (hybrid) {
            for (int g = 0; g < R; ++g) append_calls(z, g, blocks[size_t(g)]);
            continue;
        }
        const data::DocOrder o = data::doc_order(z);
        for (const std::vector<int64_t>& slots : o.slots)
            order.slots.insert(order.slots.end(), slots.begin(), slots.end());
        for (size_t d = 0; d + 1 < o.cu_seqlens.size(); ++d)
            order.cu_seqlens.push_back(b * T + o.cu_seqlens[d]);
    }
    if (!hybrid) order.cu_seqlens.push_back(B * T);
    ASSERT_GT(split, 0) << "no document is split at cp " << cp;
    std::vector<int> seen(size_t(B * T), 0), want(size_t(B * T), 1);
    std::fill_n(want.begin() + kUnlaid, 5, 0);
    for (const auto& row : rows)
        for (const auto& mine : row)
            for (int64_t x : mine)
                if (x >= 0) ++seen[size_t(x)];
    EXPECT_EQ(seen, want) << "every laid out token on exactly one rank";

    Groups net(cp, ulysses);
    std::vector<Case> got(static_cast<size_t>(cp));
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r)
        threads.emplace_back([&, r] {
            ThreadCp::Comm comm(net.group(r), net.group_rank(r));
            const std::unique_ptr<ThreadCp::Comm> ring = net.ring(r);
            CpAttention att(comm, T, true, ring.get());
            Case& g = got[size_t(r)];
            g = piece_inputs(ref, rows, r);
            const std::vector<float>&q = g.q, &k = g.k, &v = g.v, &dout = g.dout;
            CpAttentionShape s{B, Tl, NH, NKV, HS, A, KV, A};
            if (hybrid) {
                s.doc_blocks = blocks[size_t(r / U)];
            } else {
                s.doc_order = &order;
            }
            std::vector<float> lse(size_t(B * NH * Tl));
            if (bf16) {
                const auto q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v),
                           d16 = to_bf16(dout);
                att.forward(g.out.data(), lse.data(), q16.data(), k16.data(), v16.data(), s);
                const auto o16 = to_bf16(g.out);  // as the model keeps it
                att.backward(g.dq.data(), g.dk.data(), g.dv.data(), d16.data(), q16.data(),
                             k16.data(), v16.data(), o16.data(), lse.data(), s);
            } else {
                att.forward(g.out.data(), lse.data(), q.data(), k.data(), v.data(), s);
                att.backward(g.dq.data(), g.dk.data(), g.dv.data(), dout.data(), q.data(), k.data(),
                             v.data(), g.out.data(), lse.data(), s);
            }
            EXPECT_EQ(att.allocated_scratch_floats(),
                      CpAttention::scratch_floats(att.region(), B, Tl, NH, NKV, HS, U, bf16))
                << "scratch floats of rank " << r;
        });
    for (std::thread& t : threads) t.join();
    const double tol_out = !bf16    ? 2e-5
                           : hybrid ? 2e-2
                                    : 0,
                 tol_grad = !bf16    ? 2e-5
                            : hybrid ? 4e-2
                                     : 1e-5;
    expect_layout_rows(
        ref, got, rows, tol_out, tol_grad, !hybrid,
        fmt::format("{} cp {}{}", hybrid ? "hybrid" : "Ulysses", cp, bf16 ? " bf16" : ""));
}

TEST(CpAttention, PerDocumentZigzagUlyssesAndHybridMatchTheVarlenKernel) {
    for (const bool bf16 : {false, true}) {
        check_doc_zigzag_ulysses(2, 2, bf16);  // Ulysses
        check_doc_zigzag_ulysses(4, 2, bf16);  // the hybrid: 2 groups of 2
    }
}

// The Ulysses paper's claim: when the sequence and the cp degree grow together, what each rank
// puts into the all-to-alls stays the same (its T/cp rows of q, k, v, out forward and dout, dq,
// dk, dv backward, for every head), and it sends (cp-1)/cp of that to the others: T = 32 at
// cp 2 against T = 64 at cp 4, multi-head (4 heads and kv heads, dividing by both).
TEST(CpAttention, UlyssesVolumePerRankStaysWhenSequenceAndCpGrowTogether) {
    constexpr int64_t H = 4, W = H * HS;
    std::vector<int64_t> local, sent;
    for (const auto& [cp, Tg] : {std::pair{2, int64_t(32)}, std::pair{4, int64_t(64)}}) {
        ThreadCp group(cp);
        std::vector<int64_t> l(static_cast<size_t>(cp)), x(static_cast<size_t>(cp));
        std::vector<std::thread> threads;
        for (int r = 0; r < cp; ++r)
            threads.emplace_back([&, r, cp = cp, Tg = Tg] {
                ThreadCp::Comm comm(group, r);
                CpAttention att(comm, Tg, true);
                const int64_t Tl = Tg / cp, n = B * Tl * W;
                const CpAttentionShape s{B, Tl, H, H, HS, W, W, W};
                const std::vector<float> q = random(n, 11), k = random(n, 12), v = random(n, 13),
                                         dout = random(n, 14);
                std::vector<float> out(static_cast<size_t>(n)),
                    lse(static_cast<size_t>(B * H * Tl)), dq(static_cast<size_t>(n)),
                    dk(static_cast<size_t>(n)), dv(static_cast<size_t>(n));
                att.forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
                att.backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                             v.data(), out.data(), lse.data(), s);
                l[size_t(r)] = comm.a2a_local;
                x[size_t(r)] = comm.a2a_sent;
            });
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < cp; ++r) {
            // 8 all-to-alls of the rank's B x T/cp rows of every head.
            EXPECT_EQ(l[size_t(r)], 8 * B * (Tg / cp) * W) << "cp " << cp << " rank " << r;
            EXPECT_EQ(x[size_t(r)] * cp, l[size_t(r)] * (cp - 1)) << "cp " << cp << " rank " << r;
        }
        local.push_back(l[0]);
        sent.push_back(x[0]);
    }
    EXPECT_EQ(local[0], local[1]);         // constant: 8 x 2 x 16 x 32 floats at both
    EXPECT_EQ(sent[0] * 2, local[0]);      // cp 2 sends 1/2 of it
    EXPECT_EQ(sent[1] * 4, local[1] * 3);  // cp 4 sends 3/4
}

}  // namespace
}  // namespace weft::model
