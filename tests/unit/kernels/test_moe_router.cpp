// The MoE router: top-k against a brute-force sort, the losses against their analytic values,
// and the backward to the logits against central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "support/check.hpp"
#include "weft/kernels/moe_router.hpp"

namespace weft::kernels {
namespace {

struct Routed {
    std::vector<float> probs, lse, weight;
    std::vector<int32_t> expert;
};

Routed route(const std::vector<float>& logits, int64_t N, int64_t E, int64_t k, bool renorm) {
    Routed r{std::vector<float>(size_t(N * E)), std::vector<float>(size_t(N)),
             std::vector<float>(size_t(N * k)), std::vector<int32_t>(size_t(N * k))};
    moe_router_forward(r.probs.data(), r.lse.data(), r.expert.data(), r.weight.data(),
                       logits.data(), N, E, k, renorm);
    return r;
}

// Logits whose order within a row is a random permutation spaced 0.5 apart (plus small noise):
// a finite-difference step cannot change which experts are chosen.
std::vector<float> spaced_logits(int64_t N, int64_t E, uint64_t seed) {
    std::vector<float> noise = test::random_vector(size_t(N * E), seed, 0.05f);
    std::vector<float> x(size_t(N * E));
    for (int64_t t = 0; t < N; ++t) {
        std::vector<int> rank(static_cast<size_t>(E));
        std::iota(rank.begin(), rank.end(), 0);
        std::rotate(rank.begin(), rank.begin() + (t * 3) % E, rank.end());
        if (t % 2) std::reverse(rank.begin(), rank.end());
        for (int64_t e = 0; e < E; ++e)
            x[size_t(t * E + e)] = 0.5f * float(rank[size_t(e)]) + noise[size_t(t * E + e)];
    }
    return x;
}

TEST(MoeRouter, TopKMatchesBruteForceWithTiesToTheLowerIndex) {
    const int64_t N = 40, E = 6;
    // Integer logits in 0..2: many ties.
    std::vector<float> x = test::random_vector(size_t(N * E), 3);
    for (float& v : x) v = std::round(std::abs(v));
    for (int64_t k : {1, 2, 3, 6}) {
        for (bool renorm : {false, true}) {
            const Routed r = route(x, N, E, k, renorm);
            for (int64_t t = 0; t < N; ++t) {
                std::vector<int> order(static_cast<size_t>(E));
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
                    return x[size_t(t * E + a)] > x[size_t(t * E + b)];
                });
                double chosen = 0;
                for (int64_t j = 0; j < k; ++j) chosen += r.probs[size_t(t * E + order[size_t(j)])];
                for (int64_t j = 0; j < k; ++j) {
                    const int e = order[size_t(j)];
                    ASSERT_EQ(r.expert[size_t(t * k + j)], e) << "token " << t << " k " << k;
                    const double p = r.probs[size_t(t * E + e)];
                    EXPECT_NEAR(r.weight[size_t(t * k + j)], renorm ? p / chosen : p, 1e-6);
                }
            }
        }
    }
}

TEST(MoeRouter, UniformRoutingHasLoadBalanceLossOne) {
    // Equal logits: every p = 1/E, and with counts equal f = 1/E: E · Σ (1/E)(1/E) = 1.
    const int64_t N = 8, E = 4, k = 2;
    const Routed r = route(std::vector<float>(size_t(N * E), 0.3f), N, E, k, true);
    std::vector<double> counts(size_t(E), 5.0);
    const MoeRouterLoss l =
        moe_router_loss(r.probs.data(), r.lse.data(), counts.data(), N, E, {0.01, 0.1}, 1.0 / N);
    EXPECT_NEAR(l.aux, 0.01, 1e-9);
    // lse = 0.3 + log 4 for every token.
    EXPECT_NEAR(l.z, 0.1 * std::pow(0.3 + std::log(4.0), 2), 1e-6);
}

TEST(MoeRouter, PartsOfABatchAddUpToTheWhole) {
    // The losses over two halves with the whole batch's counts and scale sum to the loss of the
    // whole: what lets micro-batches and ranks each contribute their share.
    const int64_t N = 12, E = 5, k = 2;
    const std::vector<float> x = test::random_vector(size_t(N * E), 7);
    const Routed r = route(x, N, E, k, false);
    std::vector<double> counts(size_t(E), 0.0);
    moe_router_counts(counts.data(), r.expert.data(), N, k, E);
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0.0), double(N * k));
    const MoeLossCoefs c{0.02, 0.003};
    const MoeRouterLoss whole =
        moe_router_loss(r.probs.data(), r.lse.data(), counts.data(), N, E, c, 1.0 / N);
    const int64_t h = 5;
    const MoeRouterLoss a =
        moe_router_loss(r.probs.data(), r.lse.data(), counts.data(), h, E, c, 1.0 / N);
    const MoeRouterLoss b = moe_router_loss(r.probs.data() + h * E, r.lse.data() + h, counts.data(),
                                            N - h, E, c, 1.0 / N);
    EXPECT_NEAR(a.aux + b.aux, whole.aux, 1e-12);
    EXPECT_NEAR(a.z + b.z, whole.z, 1e-12);
}

// Backward against central differences of loss(logits) = Σ c · weight + aux + z, the counts
// held fixed (they are piecewise constant).
void check_backward(bool renorm, bool with_weights, MoeLossCoefs coef) {
    const int64_t N = 6, E = 5, k = 2;
    const double scale = 1.0 / N;
    std::vector<float> x = spaced_logits(N, E, 11);
    const std::vector<float> c = test::random_vector(size_t(N * k), 12);
    const Routed r0 = route(x, N, E, k, renorm);
    std::vector<double> counts(size_t(E), 0.0);
    moe_router_counts(counts.data(), r0.expert.data(), N, k, E);
    counts[1] += 3;  // as if other ranks routed more to expert 1

    auto loss = [&]() {
        const Routed r = route(x, N, E, k, renorm);
        EXPECT_EQ(r.expert, r0.expert) << "a finite-difference step changed the routing";
        const MoeRouterLoss l =
            moe_router_loss(r.probs.data(), r.lse.data(), counts.data(), N, E, coef, scale);
        double s = l.aux + l.z;
        if (with_weights)
            for (size_t i = 0; i < c.size(); ++i) s += double(c[i]) * r.weight[i];
        return s;
    };
    std::vector<float> dlogits(size_t(N * E));
    moe_router_backward(dlogits.data(), with_weights ? c.data() : nullptr, r0.probs.data(),
                        r0.lse.data(), r0.expert.data(), counts.data(), N, E, k, renorm, coef,
                        scale);
    std::vector<size_t> all(size_t(N * E));
    std::iota(all.begin(), all.end(), 0);
    const std::vector<double> fd = test::finite_difference(x, loss, all, 1e-2f);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < all.size(); ++i) {
        worst = std::max(worst, std::abs(fd[i] - dlogits[i]));
        largest = std::max(largest, std::abs(fd[i]));
    }
    EXPECT_GT(largest, 1e-4) << "the gradient checked is all zero";
    // fp32 forward, h = 1e-2: differences of ~1e-6 in sums of order 1, divided by 2h.
    EXPECT_LT(worst, 2e-3 * largest + 1e-5) << "largest |fd| " << largest;
}

TEST(MoeRouter, LoadBalanceGradientAloneMatchesFiniteDifferences) {
    check_backward(true, false, {0.5, 0});
    check_backward(false, false, {0.5, 0});
}

TEST(MoeRouter, ZLossGradientAloneMatchesFiniteDifferences) {
    check_backward(true, false, {0, 0.3});
}

TEST(MoeRouter, CombineWeightGradientMatchesFiniteDifferences) {
    check_backward(true, true, {0, 0});   // Mixtral
    check_backward(false, true, {0, 0});  // Qwen-MoE, OLMoE
    check_backward(true, true, {0.5, 0.3});
    check_backward(false, true, {0.5, 0.3});
}

// Aux-loss-free balancing: the bias picks the experts (the k largest probs + bias, against a
// brute-force sort) and leaves the weights the unbiased probabilities of the chosen ones.
TEST(MoeRouter, SelectionBiasChangesTheChoiceNotTheWeights) {
    const int64_t N = 32, E = 8;
    const std::vector<float> x = spaced_logits(N, E, 11);
    // Large enough to overturn the order: +1 for the last two experts, -1 for the first.
    std::vector<float> bias(size_t(E), 0.0f);
    bias[0] = -1.0f, bias[6] = 1.0f, bias[7] = 1.0f;
    for (int64_t k : {1, 2, 3})
        for (bool renorm : {false, true}) {
            const Routed plain = route(x, N, E, k, renorm);
            Routed r = plain;
            moe_router_forward(r.probs.data(), r.lse.data(), r.expert.data(), r.weight.data(),
                               x.data(), N, E, k, renorm, bias.data());
            EXPECT_EQ(r.probs, plain.probs);
            EXPECT_EQ(r.lse, plain.lse);
            EXPECT_NE(r.expert, plain.expert) << "k " << k;
            for (int64_t t = 0; t < N; ++t) {
                std::vector<int> order(static_cast<size_t>(E));
                std::iota(order.begin(), order.end(), 0);
                const float* p = r.probs.data() + t * E;
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
                    return p[a] + bias[size_t(a)] > p[b] + bias[size_t(b)];
                });
                double chosen = 0;
                for (int64_t j = 0; j < k; ++j) chosen += p[order[size_t(j)]];
                for (int64_t j = 0; j < k; ++j) {
                    const int e = order[size_t(j)];
                    ASSERT_EQ(r.expert[size_t(t * k + j)], e) << "token " << t << " k " << k;
                    EXPECT_NE(e, 0);  // probs are at most 1: the -1 bias keeps expert 0 out
                    EXPECT_NEAR(r.weight[size_t(t * k + j)], renorm ? p[e] / chosen : p[e], 1e-6);
                }
            }
        }
    // A zero bias chooses as no bias does.
    const std::vector<float> zero(size_t(E), 0.0f);
    Routed z = route(x, N, E, 2, true);
    moe_router_forward(z.probs.data(), z.lse.data(), z.expert.data(), z.weight.data(), x.data(), N,
                       E, 2, true, zero.data());
    EXPECT_EQ(z.expert, route(x, N, E, 2, true).expert);
}

TEST(MoeRouter, RefusesTopKAboveExperts) {
    std::vector<float> x(8), p(8), lse(2), w(10);
    std::vector<int32_t> ex(10);
    EXPECT_NE(test::error_of([&] {
                  moe_router_forward(p.data(), lse.data(), ex.data(), w.data(), x.data(), 2, 4, 5,
                                     true);
              }).find("1 <= k <= E"),
              std::string::npos);
}

}  // namespace
}  // namespace weft::kernels
