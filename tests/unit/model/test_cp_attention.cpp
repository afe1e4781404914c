// CpAttention (ring and Ulysses) against the whole-sequence kernel in one process: cp ranks run
// as threads over an in-process CpComm, each with its zigzag rows of random q, k, v (GQA: 4
// heads sharing 2 kv heads); outputs and gradients must match the kernel's at those positions.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "weft/kernels/attention.hpp"
#include "weft/kernels/attention_zigzag.hpp"
#include "weft/model/cp_attention.hpp"

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
            g_.sent_[size_t(rank_)] = send;
            g_.bar_.arrive_and_wait();
            const float* from = g_.sent_[size_t((rank_ + g_.size_ - 1) % g_.size_)];
            std::copy_n(from, n, recv);
            g_.bar_.arrive_and_wait();
        }
        void wait_shift() override {}
        void all_to_all(const float* in, float* out, int64_t n) override {
            g_.sent_[size_t(rank_)] = in;
            g_.bar_.arrive_and_wait();
            for (int j = 0; j < g_.size_; ++j)
                std::copy_n(g_.sent_[size_t(j)] + rank_ * n, n, out + j * n);
            g_.bar_.arrive_and_wait();
        }

      private:
        ThreadCp& g_;
        int rank_;
    };

  private:
    int size_;
    std::barrier<> bar_;
    std::vector<const float*> sent_;
};

std::vector<float> random(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
}

void check_against_kernel(int cp, bool ulysses) {
    const int64_t B = 2, T = 32, NH = 4, NKV = 2, HS = 8, A = NH * HS, KV = NKV * HS;
    const std::vector<float> q = random(B * T * A, 1), k = random(B * T * KV, 2),
                             v = random(B * T * KV, 3), dout = random(B * T * A, 4);
    // The whole sequence in one call.
    const kernels::AttentionShape full{B, T, T, NH, HS, A, KV, A, 0, NKV, 0};
    std::vector<float> out(size_t(B * T * A)), lse(size_t(B * NH * T));
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    kernels::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), full);
    kernels::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                v.data(), out.data(), lse.data(), full);

    ThreadCp group(cp);
    const kernels::Zigzag z = kernels::zigzag(T, cp);
    const int64_t Tl = T / cp;
    std::vector<std::vector<float>> got_out(static_cast<size_t>(cp)),
        got_dq(static_cast<size_t>(cp)), got_dk(static_cast<size_t>(cp)),
        got_dv(static_cast<size_t>(cp));
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r) {
        threads.emplace_back([&, r] {
            ThreadCp::Comm comm(group, r);
            CpAttention att(comm, T, ulysses);
            const std::vector<int64_t> pos = kernels::zigzag_positions(z, r);
            auto local = [&](const std::vector<float>& x, int64_t w) {
                std::vector<float> l(size_t(B * Tl * w));
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t t = 0; t < Tl; ++t)
                        std::copy_n(x.data() + (b * T + pos[size_t(t)]) * w, w,
                                    l.data() + (b * Tl + t) * w);
                return l;
            };
            const std::vector<float> lq = local(q, A), lk = local(k, KV), lv = local(v, KV),
                                     ldo = local(dout, A);
            const CpAttentionShape s{B, Tl, NH, NKV, HS, A, KV, A};
            std::vector<float> o(size_t(B * Tl * A)), l(size_t(B * NH * Tl));
            att.forward(o.data(), l.data(), lq.data(), lk.data(), lv.data(), s);
            std::vector<float> gq(lq.size()), gk(lk.size()), gv(lv.size());
            att.backward(gq.data(), gk.data(), gv.data(), ldo.data(), lq.data(), lk.data(),
                         lv.data(), o.data(), l.data(), s);
            // Compared with the reference's rows at this rank's positions.
            got_out[size_t(r)] = o;
            got_dq[size_t(r)] = gq;
            got_dk[size_t(r)] = gk;
            got_dv[size_t(r)] = gv;
        });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < cp; ++r) {
        const std::vector<int64_t> pos = kernels::zigzag_positions(z, r);
        auto expect = [&](const std::vector<float>& ref, const std::vector<float>& got, int64_t w,
                          const char* what) {
            for (int64_t b = 0; b < B; ++b)
                for (int64_t t = 0; t < Tl; ++t)
                    for (int64_t j = 0; j < w; ++j)
                        ASSERT_NEAR(got[size_t((b * Tl + t) * w + j)],
                                    ref[size_t((b * T + pos[size_t(t)]) * w + j)], 2e-5)
                            << what << " rank " << r << " b " << b << " t " << t;
        };
        expect(out, got_out[size_t(r)], A, "out");
        expect(dq, got_dq[size_t(r)], A, "dq");
        expect(dk, got_dk[size_t(r)], KV, "dk");
        expect(dv, got_dv[size_t(r)], KV, "dv");
    }
}

TEST(CpAttention, RingMatchesTheWholeSequenceKernel) {
    check_against_kernel(2, false);
    check_against_kernel(4, false);
}

TEST(CpAttention, UlyssesMatchesTheWholeSequenceKernel) {
    check_against_kernel(2, true);
}

}  // namespace
}  // namespace weft::model
