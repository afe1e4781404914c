// The distillation loss rows against a direct computation in double of
// (1 - a) CE + a t^2 KL(softmax(u / t) || softmax(z / t)), its gradient against central
// differences of that reference, and the fused classifier with soft targets: weight 0 is the
// plain loss, a student equal to its teacher has no loss and no gradient at weight 1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/check.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/distill_rows.hpp"

namespace weft::kernels {
namespace {

using test::max_abs_diff;
using test::random_vector;

std::vector<double> log_softmax(const float* x, int64_t V, double t) {
    double m = -1e300, s = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, double(x[v]) / t);
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) / t - m);
    std::vector<double> out(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(x[v]) / t - m - std::log(s);
    return out;
}

double reference_loss(const float* z, const float* u, int32_t target, int64_t V, double a,
                      double t) {
    if (target < 0) return 0;
    const std::vector<double> lq = log_softmax(z, V, t), lp = log_softmax(u, V, t),
                              l1 = log_softmax(z, V, 1.0);
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) kl += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
    return (1 - a) * -l1[size_t(target)] + a * t * t * kl;
}

struct Case {
    float weight, temperature;
};

class DistillRows : public ::testing::TestWithParam<Case> {};

TEST_P(DistillRows, LossIsTheMixAndGradientItsDerivative) {
    const auto [a, t] = GetParam();
    const int64_t r = 5, V = 37;
    const std::vector<float> z = random_vector(size_t(r * V), 3, 2.0f),
                             u = random_vector(size_t(r * V), 4, 3.0f);
    const std::vector<int32_t> targets = {3, 0, -1, 36, 17};
    const float scale = 0.25f;
    std::vector<float> loss(static_cast<size_t>(r)), g = z;
    distill_rows(g.data(), loss.data(), targets.data(), u.data(), r, V, scale, true, a, t);
    for (int64_t i = 0; i < r; ++i) {
        const float* zi = z.data() + i * V;
        const double want = reference_loss(zi, u.data() + i * V, targets[size_t(i)], V, a, t);
        EXPECT_NEAR(loss[size_t(i)], want, 2e-5 * std::max(1.0, std::abs(want))) << "row " << i;
        std::vector<float> zp(zi, zi + V);
        double worst = 0;
        for (int64_t v = 0; v < V; ++v) {
            // Central differences in double of the reference (h small against the logits' size).
            const double h = 1e-3;
            const float keep = zp[size_t(v)];
            zp[size_t(v)] = float(double(keep) + h);
            const double up =
                reference_loss(zp.data(), u.data() + i * V, targets[size_t(i)], V, a, t);
            zp[size_t(v)] = float(double(keep) - h);
            const double down =
                reference_loss(zp.data(), u.data() + i * V, targets[size_t(i)], V, a, t);
            zp[size_t(v)] = keep;
            const double fd = scale * (up - down) /
                              (double(float(double(keep) + h)) - double(float(double(keep) - h)));
            worst = std::max(worst, std::abs(fd - double(g[size_t(i * V + v)])));
        }
        EXPECT_LT(worst, 2e-5) << "row " << i << ": the gradient is not the loss's derivative";
    }
    // Without `grad` the logits are left alone and the losses are the same.
    std::vector<float> l2(static_cast<size_t>(r)), z2 = z;
    distill_rows(z2.data(), l2.data(), targets.data(), u.data(), r, V, scale, false, a, t);
    EXPECT_EQ(z2, z);
    EXPECT_LT(max_abs_diff(l2.data(), loss.data(), size_t(r)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Mixes, DistillRows,
                         ::testing::Values(Case{1.0f, 1.0f}, Case{1.0f, 2.0f}, Case{0.3f, 1.0f},
                                           Case{0.5f, 0.5f}, Case{0.0f, 3.0f}));

// The fused head with a teacher: weight 0 is the plain cross-entropy; a teacher whose logits
// are the student's own has, at weight 1, no loss and no gradient.
TEST(ClassifierSoftTargets, MatchesThePlainLossAndVanishesOnItself) {
    const int64_t N = 9, C = 8, V = 29;
    const std::vector<float> x = random_vector(size_t(N * C), 11),
                             w = random_vector(size_t(V * C), 12, 0.5f);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = int32_t((n * 7) % V);
    std::vector<float> own(static_cast<size_t>(N * V));
    classifier_logits(own.data(), x.data(), w.data(), N, C, V);

    std::vector<float> l0(static_cast<size_t>(N)), dx0(static_cast<size_t>(N * C)),
        dw0(static_cast<size_t>(V * C), 0.0f);
    classifier_forward_backward(l0.data(), dx0.data(), dw0.data(), x.data(), w.data(),
                                targets.data(), N, C, V, 0.5f);
    const std::vector<float> other = random_vector(size_t(N * V), 13);
    const SoftTargets hard{other.data(), 0.0f, 2.0f};
    std::vector<float> l1(static_cast<size_t>(N)), dx1(static_cast<size_t>(N * C)),
        dw1(static_cast<size_t>(V * C), 0.0f);
    classifier_forward_backward(l1.data(), dx1.data(), dw1.data(), x.data(), w.data(),
                                targets.data(), N, C, V, 0.5f, &hard);
    EXPECT_LT(max_abs_diff(l0.data(), l1.data(), size_t(N)), 1e-5);
    EXPECT_LT(max_abs_diff(dx0.data(), dx1.data(), size_t(N * C)), 1e-6);
    EXPECT_LT(max_abs_diff(dw0.data(), dw1.data(), size_t(V * C)), 1e-6);

    const SoftTargets self{own.data(), 1.0f, 1.5f};
    std::vector<float> l2(static_cast<size_t>(N)), dx2(static_cast<size_t>(N * C)),
        dw2(static_cast<size_t>(V * C), 0.0f);
    classifier_forward_backward(l2.data(), dx2.data(), dw2.data(), x.data(), w.data(),
                                targets.data(), N, C, V, 0.5f, &self);
    for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(l2[size_t(n)], 0.0f, 1e-6) << "row " << n;
    const std::vector<float> zero(static_cast<size_t>(V * C), 0.0f);
    EXPECT_LT(max_abs_diff(dx2.data(), zero.data(), size_t(N * C)), 1e-6);
    EXPECT_LT(max_abs_diff(dw2.data(), zero.data(), size_t(V * C)), 1e-6);
}

}  // namespace
}  // namespace weft::kernels
