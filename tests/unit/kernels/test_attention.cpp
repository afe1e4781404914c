// Tiled attention against a full-softmax reference in double precision, for every instruction-set
// path (portable, AVX2, AVX-512; those this CPU lacks are skipped) and the vector paths against
// the portable one, on shapes that hit every tile edge: T not a multiple of the 64-wide tiles,
// T = 1, head sizes that are not multiples of 8 or 16, KV-cache decoding (Tq < Tk, q_pos0 > 0),
// padded strides, grouped-query and multi-query attention (fewer key/value heads than query heads).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/isa.hpp"

namespace weft::kernels {
namespace {

struct Case {
    int64_t B, Tq, Tk, NH, HS, q_pos0;
    int64_t pad = 0;     // extra floats at the end of every row of q, k, v and out
    float scale = 1.0f;  // of q and k: larger makes the softmax peakier
    int64_t NKV = 0;     // key/value heads (0: NH)
};

// c with NKV key/value heads.
Case grouped(Case c, int64_t NKV) {
    c.NKV = NKV;
    return c;
}

int64_t kv_heads(const Case& c) {
    return c.NKV ? c.NKV : c.NH;
}

std::string describe(const Case& c) {
    return "B=" + std::to_string(c.B) + " Tq=" + std::to_string(c.Tq) +
           " Tk=" + std::to_string(c.Tk) + " NH=" + std::to_string(c.NH) +
           " NKV=" + std::to_string(kv_heads(c)) + " HS=" + std::to_string(c.HS) +
           " q_pos0=" + std::to_string(c.q_pos0) + " pad=" + std::to_string(c.pad);
}

AttentionShape shape_of(const Case& c) {
    const int64_t C = c.NH * c.HS, CKV = kv_heads(c) * c.HS;
    // Different paddings per tensor so that mixing up ldq, ldkv and ldo shows.
    return {c.B,           c.Tq,     c.Tk, c.NH, c.HS, C + c.pad, CKV + 2 * c.pad,
            C + 3 * c.pad, c.q_pos0, c.NKV};
}

struct Reference {
    std::vector<double> out, lse, dq, dk, dv;
};

// Full softmax over every visible key, forward and backward, in double.
Reference reference(const AttentionShape& s, const std::vector<float>& q,
                    const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<float>& dout) {
    Reference r;
    r.out.assign(s.B * s.Tq * s.ldo, 0.0);
    r.lse.assign(s.B * s.NH * s.Tq, 0.0);
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
    const double scale = 1.0 / std::sqrt(double(s.HS));
    const int64_t G = s.NKV ? s.NH / s.NKV : 1;  // query head h reads key/value head h / G
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.Tq; ++i) {
                const int64_t qi = (b * s.Tq + i) * s.ldq + h * s.HS;
                const int64_t oi = (b * s.Tq + i) * s.ldo + h * s.HS;
                const int64_t n = std::min(s.Tk, s.q_pos0 + i + 1);
                std::vector<double> p(n), dp(n);
                double mx = -INFINITY;
                for (int64_t j = 0; j < n; ++j) {
                    const int64_t kj = (b * s.Tk + j) * s.ldkv + (h / G) * s.HS;
                    double dot = 0;
                    for (int64_t d = 0; d < s.HS; ++d) dot += double(q[qi + d]) * k[kj + d];
                    p[j] = dot * scale;
                    mx = std::max(mx, p[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
                r.lse[(b * s.NH + h) * s.Tq + i] = mx + std::log(sum);
                double D = 0;
                for (int64_t j = 0; j < n; ++j) {
                    const int64_t vj = (b * s.Tk + j) * s.ldkv + (h / G) * s.HS;
                    p[j] /= sum;
                    dp[j] = 0;
                    for (int64_t d = 0; d < s.HS; ++d) {
                        r.out[oi + d] += p[j] * v[vj + d];
                        dp[j] += double(dout[oi + d]) * v[vj + d];
                    }
                    D += p[j] * dp[j];
                }
                for (int64_t j = 0; j < n; ++j) {
                    const int64_t kj = (b * s.Tk + j) * s.ldkv + (h / G) * s.HS;
                    const double ds = p[j] * (dp[j] - D) * scale;
                    for (int64_t d = 0; d < s.HS; ++d) {
                        r.dq[qi + d] += ds * k[kj + d];
                        r.dk[kj + d] += ds * q[qi + d];
                        r.dv[kj + d] += p[j] * dout[oi + d];
                    }
                }
            }
    return r;
}

// max |a - b| over the elements a head touches (row padding excluded), relative to max |b| but
// never to less than 0.1: per-element relative errors mean nothing where a gradient cancels to ~0.
double head_error(const std::vector<float>& a, const std::vector<double>& b, int64_t rows,
                  int64_t ld, int64_t C) {
    double worst = 0, size = 0.1;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < C; ++c) {
            worst = std::max(worst, std::abs(a[r * ld + c] - b[r * ld + c]));
            size = std::max(size, std::abs(b[r * ld + c]));
        }
    if (std::getenv("WEFT_TEST_VERBOSE")) std::printf("  error %.3g of %.3g\n", worst, size);
    return worst / size;
}

class AttentionTest : public test::IsaTest {};

// Errors relative to the largest reference value of each tensor: out and lse within 2e-5,
// gradients within 5e-5. Float sums over a few hundred terms give up to about 1e-5 (the peaky
// softmax case); a wrong mask or a missed tile gives errors of order 1.
void check_case(const Case& c) {
    SCOPED_TRACE(describe(c));
    const AttentionShape s = shape_of(c);
    const int64_t C = s.NH * s.HS, CKV = kv_heads(c) * s.HS;
    auto q = test::random_vector(s.B * s.Tq * s.ldq, 1, c.scale);
    auto k = test::random_vector(s.B * s.Tk * s.ldkv, 2, c.scale);
    auto v = test::random_vector(s.B * s.Tk * s.ldkv, 3);
    auto dout = test::random_vector(s.B * s.Tq * s.ldo, 4);
    const Reference r = reference(s, q, k, v, dout);

    const float sentinel = 12345.0f;  // padding of out must stay untouched
    std::vector<float> out(s.B * s.Tq * s.ldo, sentinel), lse(s.B * s.NH * s.Tq, sentinel);
    attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    EXPECT_LT(head_error(out, r.out, s.B * s.Tq, s.ldo, C), 2e-5);
    EXPECT_LT(head_error(lse, r.lse, 1, 0, lse.size()), 2e-5);
    for (int64_t row = 0; row < s.B * s.Tq; ++row)
        for (int64_t x = C; x < s.ldo; ++x) ASSERT_EQ(out[row * s.ldo + x], sentinel);

    // Backward accumulates: start from non-zero gradients and subtract them again.
    auto dq0 = test::random_vector(q.size(), 5), dk0 = test::random_vector(k.size(), 6),
         dv0 = test::random_vector(v.size(), 7);
    auto dq = dq0, dk = dk0, dv = dv0;
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                       out.data(), lse.data(), s);
    for (size_t i = 0; i < dq.size(); ++i) dq[i] -= dq0[i];
    for (size_t i = 0; i < dk.size(); ++i) dk[i] -= dk0[i], dv[i] -= dv0[i];
    EXPECT_LT(head_error(dq, r.dq, s.B * s.Tq, s.ldq, C), 5e-5) << "dq";
    EXPECT_LT(head_error(dk, r.dk, s.B * s.Tk, s.ldkv, CKV), 5e-5) << "dk";
    EXPECT_LT(head_error(dv, r.dv, s.B * s.Tk, s.ldkv, CKV), 5e-5) << "dv";
    for (int64_t row = 0; row < s.B * s.Tq; ++row)
        for (int64_t x = C; x < s.ldq; ++x) ASSERT_EQ(dq[row * s.ldq + x], 0.0f) << "dq padding";
    for (int64_t row = 0; row < s.B * s.Tk; ++row)
        for (int64_t x = CKV; x < s.ldkv; ++x)
            ASSERT_EQ(dk[row * s.ldkv + x], 0.0f) << "dk padding";
}

TEST_P(AttentionTest, SingleToken) {
    check_case({1, 1, 1, 1, 16, 0});
}

TEST_P(AttentionTest, TilesWithRaggedEdges) {
    check_case({2, 100, 100, 3, 64, 0});
    check_case({1, 130, 130, 2, 64, 0, 3});
    check_case({1, 64, 64, 1, 64, 0});
}

TEST_P(AttentionTest, HeadSizes) {
    for (int64_t hs : {1, 7, 16, 32, 48, 80, 128}) check_case({1, 70, 70, 2, hs, 0, 1});
}

TEST_P(AttentionTest, PeakySoftmax) {
    check_case({1, 90, 90, 2, 32, 0, 0, 4.0f});
}

TEST_P(AttentionTest, KvCacheDecoding) {
    check_case({2, 1, 77, 3, 64, 76});     // one new token after 76 cached ones
    check_case({1, 20, 150, 2, 48, 130});  // a chunk of new tokens
    check_case({1, 3, 200, 1, 16, 197, 2});
}

TEST_P(AttentionTest, QueriesPastTheLastKey) {
    // Queries at positions >= Tk see every key: ring attention's blocks below the diagonal.
    check_case({1, 70, 90, 2, 32, 50});
    check_case({1, 10, 30, 1, 16, 100});
}

TEST_P(AttentionTest, FusedQkvMatchesStridedCall) {
    const int64_t B = 2, T = 67, NH = 3, HS = 32, C = NH * HS;
    auto qkv = test::random_vector(B * T * 3 * C, 11);
    auto dout = test::random_vector(B * T * C, 12);
    std::vector<float> out(B * T * C), lse(B * NH * T), out2(B * T * C), lse2(B * NH * T);
    attention_forward_qkv(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
    const AttentionShape s{B, T, T, NH, HS, 3 * C, 3 * C, C};
    attention_forward(out2.data(), lse2.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, s);
    EXPECT_EQ(out, out2);
    EXPECT_EQ(lse, lse2);

    std::vector<float> dqkv(qkv.size(), 7.0f), dqkv2(qkv.size(), 0.0f);  // qkv version overwrites
    attention_backward_qkv(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH,
                           HS);
    attention_backward(dqkv2.data(), dqkv2.data() + C, dqkv2.data() + 2 * C, dout.data(),
                       qkv.data(), qkv.data() + C, qkv.data() + 2 * C, out.data(), lse.data(), s);
    EXPECT_EQ(dqkv, dqkv2);
}

// The vector path against the portable one on the same inputs, every output and gradient: both
// are float computations of the same sums in different orders (and exp2 polynomials against
// std::exp), so they agree to float rounding, within 2e-5 of the largest value (out, lse) and
// 5e-5 (gradients); a lane or tile mistake in either gives errors of order 1. Shapes: ragged
// tiles, a head size that is no multiple of 8 or 16, grouped queries and keys at an offset.
TEST_P(AttentionTest, MatchesPortablePath) {
    if (GetParam() == Isa::portable) GTEST_SKIP() << "the portable path itself";
    for (const Case& c : {grouped({2, 130, 130, 4, 40, 0, 1}, 2),
                          grouped({1, 70, 150, 6, 13, 100}, 3), Case{1, 65, 65, 2, 64, 0, 2}}) {
        SCOPED_TRACE(describe(c));
        AttentionShape s = shape_of(c);
        if (c.Tq < c.Tk) s.k_pos0 = 20;  // keys from position 20: a ring-attention block
        const int64_t C = s.NH * s.HS, CKV = kv_heads(c) * s.HS;
        const auto q = test::random_vector(s.B * s.Tq * s.ldq, 1),
                   k = test::random_vector(s.B * s.Tk * s.ldkv, 2),
                   v = test::random_vector(s.B * s.Tk * s.ldkv, 3),
                   dout = test::random_vector(s.B * s.Tq * s.ldo, 4);
        struct Result {
            std::vector<float> out, lse, dq, dk, dv;
        };
        auto run = [&](Isa isa) {
            set_kernel_isa(isa);
            Result r{std::vector<float>(s.B * s.Tq * s.ldo), std::vector<float>(s.B * s.NH * s.Tq),
                     std::vector<float>(q.size()), std::vector<float>(k.size()),
                     std::vector<float>(v.size())};
            attention_forward(r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), s);
            attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(),
                               k.data(), v.data(), r.out.data(), r.lse.data(), s);
            return r;
        };
        const Result a = run(GetParam()), p = run(Isa::portable);
        set_kernel_isa(GetParam());
        auto wide = [](const std::vector<float>& x) {
            return std::vector<double>(x.begin(), x.end());
        };
        // Rows that see no key have lse = -inf on both paths; compare them as equal, then the
        // finite rest.
        std::vector<float> lse_a = a.lse, lse_p = p.lse;
        for (size_t i = 0; i < lse_a.size(); ++i)
            if (std::isinf(lse_p[i])) {
                EXPECT_EQ(lse_a[i], lse_p[i]) << "lse " << i;
                lse_a[i] = lse_p[i] = 0.0f;
            }
        EXPECT_LT(head_error(a.out, wide(p.out), s.B * s.Tq, s.ldo, C), 2e-5) << "out";
        EXPECT_LT(head_error(lse_a, wide(lse_p), 1, 0, lse_a.size()), 2e-5) << "lse";
        EXPECT_LT(head_error(a.dq, wide(p.dq), s.B * s.Tq, s.ldq, C), 5e-5) << "dq";
        EXPECT_LT(head_error(a.dk, wide(p.dk), s.B * s.Tk, s.ldkv, CKV), 5e-5) << "dk";
        EXPECT_LT(head_error(a.dv, wide(p.dv), s.B * s.Tk, s.ldkv, CKV), 5e-5) << "dv";
    }
}

TEST_P(AttentionTest, Deterministic) {
    const Case c{2, 150, 150, 2, 64, 0};
    const AttentionShape s = shape_of(c);
    auto q = test::random_vector(s.B * s.Tq * s.ldq, 1),
         k = test::random_vector(s.B * s.Tk * s.ldkv, 2),
         v = test::random_vector(s.B * s.Tk * s.ldkv, 3),
         dout = test::random_vector(s.B * s.Tq * s.ldo, 4);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        std::vector<float> out(dout.size()), lse(s.B * s.NH * s.Tq), dq(q.size()), dk(k.size()),
            dv(v.size());
        attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
        attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                           v.data(), out.data(), lse.data(), s);
        std::vector<float> all = out;
        for (const auto* x : {&lse, &dq, &dk, &dv}) all.insert(all.end(), x->begin(), x->end());
        if (run == 0)
            first = all;
        else
            EXPECT_EQ(all, first);
    }
}

// L = Σ w ⊙ out, differentiated by central differences (h = 1e-2 in float, loss summed in
// double) at every fifth element of q, k and v: agreement within 5e-4 + 1e-3·|g|, about ten
// times the O(h²) truncation and float rounding seen (5e-5 for gradients up to 1.5).
void check_finite_differences(const Case& c) {
    SCOPED_TRACE(describe(c));
    const AttentionShape s = shape_of(c);
    auto q = test::random_vector(s.B * s.Tq * s.ldq, 21),
         k = test::random_vector(s.B * s.Tk * s.ldkv, 22),
         v = test::random_vector(s.B * s.Tk * s.ldkv, 23),
         w = test::random_vector(s.B * s.Tq * s.ldo, 24);
    std::vector<float> out(w.size()), lse(s.B * s.NH * s.Tq);
    auto loss = [&] {
        attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
        double L = 0;
        for (size_t i = 0; i < out.size(); ++i) L += double(w[i]) * out[i];
        return L;
    };
    loss();
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                       out.data(), lse.data(), s);
    for (auto [x, g, name] : {std::tuple{&q, &dq, "q"}, {&k, &dk, "k"}, {&v, &dv, "v"}}) {
        std::vector<size_t> ix;
        for (size_t i = 0; i < x->size(); i += 5) ix.push_back(i);
        const auto fd = test::finite_difference(*x, loss, ix);
        for (size_t n = 0; n < ix.size(); ++n)
            EXPECT_NEAR((*g)[ix[n]], fd[n], 5e-4 + 1e-3 * std::abs(fd[n])) << name << ix[n];
    }
}

TEST_P(AttentionTest, FiniteDifferenceGradient) {
    check_finite_differences({1, 9, 12, 2, 8, 3});
    // Two query heads per key/value head: dK and dV sum both heads' terms.
    check_finite_differences(grouped({1, 9, 12, 4, 8, 3}, 2));
}

// Grouped-query attention: query head h reads key/value head h / (NH / NKV), and the gradient of
// a key/value head sums its query heads'. Shapes as above: ragged tiles, head sizes off 16,
// padded strides, decoding with q_pos0 > 0, queries past the last key.
TEST_P(AttentionTest, GroupedQueryHeads) {
    check_case(grouped({2, 100, 100, 4, 64, 0}, 2));
    check_case(grouped({1, 130, 130, 6, 24, 0, 3}, 2));
    check_case(grouped({2, 70, 70, 6, 7, 0, 1}, 3));
    check_case(grouped({1, 65, 65, 9, 80, 0, 2}, 3));
}

TEST_P(AttentionTest, MultiQuery) {
    check_case(grouped({2, 90, 90, 4, 32, 0, 1}, 1));
    check_case(grouped({1, 129, 129, 3, 48, 0}, 1));
}

TEST_P(AttentionTest, GroupedQueryKvCacheDecoding) {
    check_case(grouped({2, 1, 77, 4, 64, 76}, 2));        // one new token after 76 cached ones
    check_case(grouped({1, 20, 150, 6, 48, 130, 1}, 2));  // a chunk of new tokens
    check_case(grouped({1, 3, 200, 4, 16, 197}, 1));
    check_case(grouped({1, 70, 90, 4, 32, 50}, 2));  // queries past the last key
}

// The backward either runs a key/value head's query heads in order on one thread or gives each
// its own partial dK, dV and adds them in that order after; which one depends on the threads
// there are. Both must give the same bits.
TEST_P(AttentionTest, GroupedQueryBackwardIndependentOfThreads) {
    for (const Case& c :
         {grouped({1, 130, 130, 4, 32, 0, 1}, 1), grouped({2, 100, 100, 6, 48, 20}, 2)}) {
        SCOPED_TRACE(describe(c));
        const AttentionShape s = shape_of(c);
        auto q = test::random_vector(s.B * s.Tq * s.ldq, 1),
             k = test::random_vector(s.B * s.Tk * s.ldkv, 2),
             v = test::random_vector(s.B * s.Tk * s.ldkv, 3),
             dout = test::random_vector(s.B * s.Tq * s.ldo, 4);
        std::vector<float> out(dout.size()), lse(s.B * s.NH * s.Tq);
        attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
        std::vector<float> first;
        const int keep = omp_get_max_threads();
        for (int threads : {1, 2, 4, 8}) {
            omp_set_num_threads(threads);
            auto dq = test::random_vector(q.size(), 5), dk = test::random_vector(k.size(), 6),
                 dv = test::random_vector(v.size(), 7);
            attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), out.data(), lse.data(), s);
            std::vector<float> all = dq;
            for (const auto* x : {&dk, &dv}) all.insert(all.end(), x->begin(), x->end());
            if (first.empty())
                first = all;
            else
                EXPECT_EQ(all, first) << threads << " threads";
        }
        omp_set_num_threads(keep);
    }
}

TEST_P(AttentionTest, FusedGroupedQkvMatchesStridedCall) {
    const int64_t B = 2, T = 67, NH = 6, NKV = 2, HS = 24, A = NH * HS, KV = NKV * HS;
    const int64_t ld = A + 2 * KV;
    auto qkv = test::random_vector(B * T * ld, 13);
    auto dout = test::random_vector(B * T * A, 14);
    std::vector<float> out(B * T * A), lse(B * NH * T), out2(B * T * A), lse2(B * NH * T);
    attention_forward_qkv(out.data(), lse.data(), qkv.data(), B, T, NH, HS, NKV);
    AttentionShape s{B, T, T, NH, HS, ld, ld, A};
    s.NKV = NKV;
    const float* q = qkv.data();
    attention_forward(out2.data(), lse2.data(), q, q + A, q + A + KV, s);
    EXPECT_EQ(out, out2);
    EXPECT_EQ(lse, lse2);

    std::vector<float> dqkv(qkv.size(), 7.0f), dqkv2(qkv.size(), 0.0f);  // qkv version overwrites
    attention_backward_qkv(dqkv.data(), dout.data(), q, out.data(), lse.data(), B, T, NH, HS, NKV);
    float* d = dqkv2.data();
    attention_backward(d, d + A, d + A + KV, dout.data(), q, q + A, q + A + KV, out.data(),
                       lse.data(), s);
    EXPECT_EQ(dqkv, dqkv2);
}

TEST_P(AttentionTest, GroupedQueryShapeErrors) {
    std::vector<float> buf(4096);
    float* p = buf.data();
    AttentionShape s{1, 4, 4, 6, 8, 48, 32, 48};
    s.NKV = 4;  // does not divide 6
    EXPECT_NE(test::error_of([&] {
                  attention_forward(p, p, p, p, p, s);
              }).find("NKV=4 key/value heads must divide the NH=6 query heads"),
              std::string::npos);
    s.NKV = 2;
    s.ldkv = 15;  // below NKV*HS = 16
    EXPECT_NE(test::error_of([&] {
                  attention_backward(p, p, p, p, p, p, p, p, p, s);
              }).find("ldkv=15 must be at least NKV*HS=16"),
              std::string::npos);
    EXPECT_NE(
        test::error_of([&] { attention_forward_qkv(p, p, p, 1, 4, 6, 8, -1); }).find("NKV=-1"),
        std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionTest, test::kAllIsas, test::isa_param_name);

}  // namespace
}  // namespace weft::kernels
