// MoE dispatch and combine: permute then unpermute is the identity (values and gradients), the
// grouping is stable, the combine's backward matches finite differences, and a capacity drops
// the lowest-scored slots.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "support/check.hpp"
#include "weft/kernels/moe_dispatch.hpp"

namespace weft::kernels {
namespace {

std::vector<int32_t> random_experts(int64_t N, int64_t k, int64_t E, uint64_t seed) {
    // Distinct experts per token, as a router gives.
    const std::vector<float> r = test::random_vector(size_t(N * E), seed);
    std::vector<int32_t> ex(size_t(N * k));
    for (int64_t t = 0; t < N; ++t) {
        std::vector<int32_t> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return r[size_t(t * E + a)] > r[size_t(t * E + b)];
        });
        for (int64_t j = 0; j < k; ++j) ex[size_t(t * k + j)] = order[size_t(j)];
    }
    return ex;
}

TEST(MoeDispatch, GroupingIsStableByExpert) {
    const int64_t N = 17, E = 5, k = 2;
    const std::vector<int32_t> ex = random_experts(N, k, E, 1);
    const std::vector<float> score(size_t(N * k), 0.5f);
    MoePlan p;
    moe_plan(p, ex.data(), score.data(), N, E, k);
    ASSERT_EQ(p.rows(), N * k);
    EXPECT_EQ(p.dropped, 0);
    for (int64_t e = 0; e < E; ++e) {
        for (int64_t r = p.offsets[size_t(e)]; r < p.offsets[size_t(e + 1)]; ++r) {
            const int32_t s = p.slot_of_row[size_t(r)];
            EXPECT_EQ(ex[size_t(s)], e);
            EXPECT_EQ(p.row_of_slot[size_t(s)], r);
            if (r > p.offsets[size_t(e)]) {
                EXPECT_LT(p.slot_of_row[size_t(r - 1)], s);
            }
        }
    }
}

TEST(MoeDispatch, PermuteThenUnpermuteIsTheIdentity) {
    const int64_t N = 23, E = 4, C = 8;
    const std::vector<float> x = test::random_vector(size_t(N * C), 2);
    for (int64_t k : {1, 2}) {
        const std::vector<int32_t> ex = random_experts(N, k, E, 3);
        const std::vector<float> ones(size_t(N * k), 1.0f);
        MoePlan p;
        moe_plan(p, ex.data(), ones.data(), N, E, k);
        std::vector<float> xp(size_t(p.rows() * C)), y(size_t(N * C));
        moe_permute(xp.data(), x.data(), p, C);
        moe_unpermute(y.data(), xp.data(), ones.data(), nullptr, p, C);
        // Weight 1 on each of k slots: k x, exactly (a sum of k equal floats, k <= 2).
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], float(k) * x[i]) << i;

        // Gradients: unpermute's backward then permute's gives k dy back, and dweight = <dy, x>.
        const std::vector<float> dy = test::random_vector(size_t(N * C), 4);
        std::vector<float> dyp(xp.size()), dw(size_t(N * k)), dx(size_t(N * C));
        moe_unpermute_backward(dyp.data(), dw.data(), dy.data(), xp.data(), ones.data(), p, C);
        moe_permute_backward(dx.data(), dyp.data(), p, C, false);
        for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], float(k) * dy[i]) << i;
        for (int64_t s = 0; s < N * k; ++s) {
            double dot = 0;
            for (int64_t c = 0; c < C; ++c)
                dot += double(dy[size_t(s / k * C + c)]) * x[size_t(s / k * C + c)];
            EXPECT_NEAR(dw[size_t(s)], dot, 1e-5);
        }
    }
}

TEST(MoeDispatch, CombineBackwardMatchesFiniteDifferences) {
    const int64_t N = 7, E = 3, k = 2, C = 4;
    const std::vector<int32_t> ex = random_experts(N, k, E, 5);
    std::vector<float> w = test::random_vector(size_t(N * k), 6);
    MoePlan p;
    moe_plan(p, ex.data(), w.data(), N, E, k);
    std::vector<float> yp = test::random_vector(size_t(p.rows() * C), 7);
    const std::vector<float> res = test::random_vector(size_t(N * C), 8);
    const std::vector<float> c = test::random_vector(size_t(N * C), 9);
    auto loss = [&]() {
        std::vector<float> y(size_t(N * C));
        moe_unpermute(y.data(), yp.data(), w.data(), res.data(), p, C);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += double(c[i]) * y[i];
        return s;
    };
    std::vector<float> dyp(yp.size()), dw(w.size());
    moe_unpermute_backward(dyp.data(), dw.data(), c.data(), yp.data(), w.data(), p, C);
    std::vector<size_t> iy(yp.size()), iw(w.size());
    std::iota(iy.begin(), iy.end(), 0);
    std::iota(iw.begin(), iw.end(), 0);
    const std::vector<double> fy = test::finite_difference(yp, loss, iy);
    const std::vector<double> fw = test::finite_difference(w, loss, iw);
    // The loss is linear in each: central differences are exact up to fp32 rounding.
    for (size_t i = 0; i < iy.size(); ++i) EXPECT_NEAR(dyp[i], fy[i], 1e-3) << "yp " << i;
    for (size_t i = 0; i < iw.size(); ++i) EXPECT_NEAR(dw[i], fw[i], 1e-3) << "weight " << i;
}

TEST(MoeDispatch, CapacityDropsTheLowestScores) {
    // Six tokens, top-1 over two experts: five choose expert 0, one expert 1. Capacity factor 1
    // gives ceil(6 / 2) = 3 slots per expert, so expert 0 keeps its three best-scored tokens.
    const int64_t N = 6, E = 2, k = 1, C = 2;
    const std::vector<int32_t> ex = {0, 0, 1, 0, 0, 0};
    const std::vector<float> score = {0.6f, 0.9f, 0.7f, 0.55f, 0.8f, 0.6f};
    ASSERT_EQ(moe_capacity(1.0, N, E, k), 3);
    ASSERT_EQ(moe_capacity(0.0, N, E, k), -1);
    MoePlan p;
    moe_plan(p, ex.data(), score.data(), N, E, k, moe_capacity(1.0, N, E, k));
    EXPECT_EQ(p.dropped, 2);
    // Kept: tokens 1 (0.9), 4 (0.8), and of the tied 0.6s the earlier, token 0; in token order.
    EXPECT_EQ(p.slot_of_row, (std::vector<int32_t>{0, 1, 4, 2}));
    EXPECT_EQ(p.row_of_slot, (std::vector<int32_t>{0, 1, 3, -1, 2, -1}));
    // A dropped token's output is its residual alone.
    std::vector<float> yp(size_t(p.rows() * C), 1.0f), res(size_t(N * C), 0.25f), y(size_t(N * C));
    moe_unpermute(y.data(), yp.data(), score.data(), res.data(), p, C);
    EXPECT_EQ(y[3 * C], 0.25f);
    EXPECT_EQ(y[5 * C], 0.25f);
    EXPECT_FLOAT_EQ(y[1 * C], 0.25f + 0.9f);
}

}  // namespace
}  // namespace weft::kernels
