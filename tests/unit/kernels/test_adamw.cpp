#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/adamw.hpp"
#include "weft/kernels/isa.hpp"

namespace wk = weft::kernels;
using weft::test::max_rel_diff;
using weft::test::random_vector;

namespace {

class AdamW : public weft::test::IsaTest {};

// The update written out by hand in double, one element at a time.
void reference_step(std::vector<double>& w, const std::vector<float>& grad, std::vector<double>& m,
                    std::vector<double>& v, const wk::AdamWParams& p) {
    const double b1 = p.beta1, b2 = p.beta2;
    const double bc1 = 1.0 - std::pow(b1, double(p.step)), bc2 = 1.0 - std::pow(b2, double(p.step));
    for (size_t i = 0; i < w.size(); ++i) {
        const double g = double(grad[i]) * p.grad_scale;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        const double mhat = m[i] / bc1, vhat = v[i] / bc2;
        w[i] -= double(p.lr) * (mhat / (std::sqrt(vhat) + p.eps) + double(p.weight_decay) * w[i]);
    }
}

std::vector<float> as_float(const std::vector<double>& v) {
    return {v.begin(), v.end()};
}

// Four steps with changing gradients, weight decay and a clipping scale, on sizes with tails and
// one that runs threaded. 1e-5 relative above an absolute floor of 1e-2 for param, m and v
// (measured: within 1-2 fp32 ulps).
TEST_P(AdamW, MatchesDoubleReferenceOverSteps) {
    for (int64_t n : {1, 15, 17, 1000 + 3, 5 * 4096 + 7}) {
        auto w = random_vector(n, 1);
        std::vector<float> m(n, 0.0f), v(n, 0.0f);
        std::vector<double> rw(w.begin(), w.end()), rm(n, 0.0), rv(n, 0.0);
        wk::AdamWParams p{.lr = 1e-2f, .weight_decay = 0.1f};
        for (int64_t step = 1; step <= 4; ++step) {
            const auto grad = random_vector(n, 10 + step, 0.5f * float(step));
            p.step = step;
            p.grad_scale = step == 3 ? 0.25f : 1.0f;
            wk::adamw_update(w.data(), grad.data(), m.data(), v.data(), n, p);
            reference_step(rw, grad, rm, rv, p);
            EXPECT_LT(max_rel_diff(w.data(), as_float(rw).data(), n, 1e-2), 1e-5)
                << n << " " << step;
            EXPECT_LT(max_rel_diff(m.data(), as_float(rm).data(), n, 1e-2), 1e-5)
                << n << " " << step;
            EXPECT_LT(max_rel_diff(v.data(), as_float(rv).data(), n, 1e-2), 1e-5)
                << n << " " << step;
        }
    }
}

// One element by hand: at step 1 bias correction makes mhat = g and vhat = g², so the update is
// lr · (g / (|g| + eps) + wd · w) whatever the betas.
TEST_P(AdamW, FirstStepIsSignedLearningRate) {
    float w = 2.0f, g = -4.0f, m = 0.0f, v = 0.0f;
    wk::AdamWParams p{.lr = 0.1f,
                      .beta1 = 0.8f,
                      .beta2 = 0.99f,
                      .eps = 0.0f,
                      .weight_decay = 0.25f,
                      .step = 1,
                      .grad_scale = 0.5f};
    wk::adamw_update(&w, &g, &m, &v, 1, p);
    // g·scale = -2: m = 0.2·-2, v = 0.01·4; mhat = -2, vhat = 4; w = 2 - 0.1·(-1 + 0.25·2).
    // (1 - β) is taken of the fp32 β, which is not exactly 0.8 or 0.99.
    EXPECT_FLOAT_EQ(m, (1.0f - 0.8f) * -2.0f);
    EXPECT_FLOAT_EQ(v, (1.0f - 0.99f) * 4.0f);
    EXPECT_FLOAT_EQ(w, 2.05f);
}

TEST(AdamWParams, RejectsZeroStep) {
    float x = 0;
    EXPECT_THROW(wk::adamw_update(&x, &x, &x, &x, 1, wk::AdamWParams{.lr = 1e-3f, .step = 0}),
                 weft::Error);
}

INSTANTIATE_TEST_SUITE_P(Isa, AdamW, ::testing::Values(wk::Isa::portable, wk::Isa::avx512),
                         [](const auto& info) {
                             return info.param == wk::Isa::avx512 ? "avx512" : "portable";
                         });

}  // namespace
