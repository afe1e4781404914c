// The Llama family's kernels against naive double-precision references and central finite
// differences: RMSNorm, rotary embeddings (plain, linear and llama3 scaling) and SwiGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/rmsnorm.hpp"
#include "weft/kernels/rope.hpp"
#include "weft/kernels/swiglu.hpp"

namespace weft::kernels {
namespace {

// Σ_i w_i * f(x)_i: a scalar loss whose gradient is the backward of f given dout = w.
double weighted(const std::vector<float>& y, const std::vector<float>& w) {
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * w[i];
    return s;
}

TEST(RmsNorm, ForwardMatchesReferenceAndBackwardFiniteDifferences) {
    for (int64_t C : {7, 64, 200}) {
        const int64_t N = 300;  // enough rows for the parallel path
        std::vector<float> x = test::random_vector(size_t(N * C), 1, 2.0f);
        std::vector<float> w = test::random_vector(size_t(C), 2);
        std::vector<float> dy = test::random_vector(size_t(N * C), 3);
        std::vector<float> y(x.size()), rstd(static_cast<size_t>(N));
        rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
        for (int64_t i = 0; i < N; ++i) {
            double ss = 0;
            for (int64_t c = 0; c < C; ++c) ss += double(x[i * C + c]) * x[i * C + c];
            const double r = 1 / std::sqrt(ss / double(C) + 1e-5);
            EXPECT_NEAR(rstd[i], r, 1e-6 * r);
            for (int64_t c = 0; c < C; ++c)
                ASSERT_NEAR(y[i * C + c], x[i * C + c] * r * w[c], 1e-5) << "C " << C;
        }
        // Backward accumulates into dx and dw.
        std::vector<float> dx(x.size(), 0.5f), dw(size_t(C), 0.25f);
        rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
        auto loss_x = [&] {
            rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
            return weighted(y, dy);
        };
        std::vector<size_t> ix = {0, size_t(C) + 3, size_t(N * C - 1)};
        std::vector<double> fx = test::finite_difference(x, loss_x, ix, 1e-3f);
        for (size_t j = 0; j < ix.size(); ++j)
            EXPECT_NEAR(dx[ix[j]] - 0.5f, fx[j], 2e-3 + 1e-2 * std::abs(fx[j]));
        std::vector<size_t> iw = {0, size_t(C) / 2, size_t(C) - 1};
        std::vector<double> fw = test::finite_difference(w, loss_x, iw, 1e-3f);
        for (size_t j = 0; j < iw.size(); ++j)
            EXPECT_NEAR(dw[iw[j]] - 0.25f, fw[j], 2e-3 + 1e-2 * std::abs(fw[j]));
    }
}

TEST(Rope, Llama3ScalingMatchesTransformersFormula) {
    // Llama 3.1: theta 500000, factor 8, low 1, high 4, original context 8192, head 128.
    RopeScaling s;
    s.kind = RopeScaling::Kind::llama3;
    s.factor = 8;
    s.low_freq_factor = 1;
    s.high_freq_factor = 4;
    s.original_max_position = 8192;
    const std::vector<double> plain = rope_inv_freq(128, 500000.0, {});
    const std::vector<double> f = rope_inv_freq(128, 500000.0, s);
    for (int i = 0; i < 64; ++i) {
        const double base = std::pow(500000.0, -2.0 * i / 128);
        ASSERT_NEAR(plain[size_t(i)], base, 1e-15);
        const double wavelen = 2 * std::numbers::pi / base;
        double want = base;  // wavelength under 8192 / 4 = 2048: kept
        if (wavelen > 8192)
            want = base / 8;  // over 8192 / 1: divided by the factor
        else if (wavelen >= 2048) {
            const double smooth = (8192 / wavelen - 1) / (4 - 1);
            want = (1 - smooth) * base / 8 + smooth * base;
        }
        EXPECT_NEAR(f[size_t(i)], want, 1e-12 * base) << "index " << i;
    }
    // The three bands all occur at this head size: index 0 kept, 63 scaled, one in between.
    EXPECT_EQ(f[0], plain[0]);
    EXPECT_NEAR(f[63], plain[63] / 8, 1e-18);
    bool blended = false;
    for (int i = 0; i < 64; ++i)
        blended |= f[size_t(i)] < plain[size_t(i)] && f[size_t(i)] > plain[size_t(i)] / 8;
    EXPECT_TRUE(blended);
    RopeScaling lin;
    lin.kind = RopeScaling::Kind::linear;
    lin.factor = 4;
    EXPECT_NEAR(rope_inv_freq(64, 10000.0, lin)[5], rope_inv_freq(64, 10000.0, {})[5] / 4, 1e-15);
}

TEST(Rope, ForwardIsRotateHalfAndBackwardItsTranspose) {
    const int64_t B = 2, T = 5, H = 3, HS = 8, ld = H * HS + 5, pos0 = 3;
    const RopeTable table = rope_table(HS, 16, 10000.0, {});
    std::vector<float> x = test::random_vector(size_t(B * T * ld), 4);
    std::vector<float> y = x;
    rope_forward(y.data(), B, T, H, HS, ld, pos0, table);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < HS / 2; ++i) {
                    const double a = double(pos0 + t) * std::pow(10000.0, -2.0 * i / HS);
                    const int64_t o = (b * T + t) * ld + h * HS;
                    const double lo = x[o + i], hi = x[o + i + HS / 2];
                    ASSERT_NEAR(y[o + i], lo * std::cos(a) - hi * std::sin(a), 1e-5);
                    ASSERT_NEAR(y[o + i + HS / 2], hi * std::cos(a) + lo * std::sin(a), 1e-5);
                }
    // Columns past the heads are untouched.
    EXPECT_EQ(y[size_t(H * HS)], x[size_t(H * HS)]);
    // Backward: ⟨rope(x), d⟩ = ⟨x, rope_backward(d)⟩ for any d.
    std::vector<float> d = test::random_vector(x.size(), 5), dx = d;
    rope_backward(dx.data(), B, T, H, HS, ld, pos0, table);
    EXPECT_NEAR(weighted(y, d), weighted(x, dx), 1e-4);
    // Positions beyond the table are refused.
    EXPECT_THROW(rope_forward(y.data(), B, T, H, HS, ld, 12, table), Error);
}

class SwiGlu : public test::IsaTest {};

TEST_P(SwiGlu, ForwardMatchesReferenceAndBackwardFiniteDifferences) {
    const int64_t N = 40, F = 33;
    std::vector<float> gu = test::random_vector(size_t(N * 2 * F), 6, 3.0f);
    gu[0] = 100.0f, gu[1] = -100.0f;  // no overflow at the far ends
    std::vector<float> dy = test::random_vector(size_t(N * F), 7), y(size_t(N * F));
    swiglu_forward(y.data(), gu.data(), N, F);
    for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < F; ++j) {
            const double g = gu[size_t(i * 2 * F + j)], u = gu[size_t(i * 2 * F + F + j)];
            ASSERT_NEAR(y[size_t(i * F + j)], g / (1 + std::exp(-g)) * u,
                        1e-5 * (1 + std::abs(g * u)));
        }
    std::vector<float> dgu(gu.size());
    swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F);
    for (float v : dgu) ASSERT_TRUE(std::isfinite(v));
    auto loss = [&] {
        swiglu_forward(y.data(), gu.data(), N, F);
        return weighted(y, dy);
    };
    std::vector<size_t> idx = {5, size_t(F) + 5, size_t(2 * F * 7 + 3), size_t(2 * F * 7 + F + 3)};
    std::vector<double> fd = test::finite_difference(gu, loss, idx, 1e-3f);
    for (size_t j = 0; j < idx.size(); ++j)
        EXPECT_NEAR(dgu[idx[j]], fd[j], 1e-3 + 1e-2 * std::abs(fd[j])) << idx[j];
}

// On gu kept as bf16: bit for bit the fp32 kernel on the widened gu, the forward's output (and
// swiglu_backward_bf16's gradient) rounded to nearest even. F = 37 leaves a 5-lane tail after two
// 16-lane steps.
TEST_P(SwiGlu, Bf16InputGivesTheFp32KernelsBitsOnTheWidenedValues) {
    const int64_t N = 9, F = 37, n = N * 2 * F;
    std::vector<float> gu = test::random_vector(size_t(n), 8, 3.0f);
    gu[0] = 100.0f, gu[1] = -100.0f;
    std::vector<uint16_t> gu16(static_cast<size_t>(n)), y16(static_cast<size_t>(N * F), 0xffff),
        want16(y16.size());
    convert_fp32_to_bf16(gu16.data(), gu.data(), 1, n, n);
    std::vector<float> wide(static_cast<size_t>(n)), y(static_cast<size_t>(N * F));
    for (int64_t i = 0; i < n; ++i) wide[size_t(i)] = bf16_to_fp32(gu16[size_t(i)]);
    swiglu_forward(y.data(), wide.data(), N, F);
    convert_fp32_to_bf16(want16.data(), y.data(), 1, N * F, N * F);
    swiglu_forward_bf16(y16.data(), gu16.data(), N, F);
    EXPECT_EQ(y16, want16);

    const std::vector<float> dy = test::random_vector(size_t(N * F), 9);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 123.0f);
    swiglu_backward(want.data(), dy.data(), wide.data(), N, F);
    swiglu_backward_bf16_input(got.data(), dy.data(), gu16.data(), N, F);
    EXPECT_EQ(got, want);

    // Written rounded (for the gate/up products that read it so): the rounding of the above.
    std::vector<uint16_t> want_d16(static_cast<size_t>(n)), got_d16(want_d16.size(), 0xffff);
    convert_fp32_to_bf16(want_d16.data(), want.data(), 1, n, n);
    swiglu_backward_bf16(got_d16.data(), dy.data(), gu16.data(), N, F);
    EXPECT_EQ(got_d16, want_d16);
}

INSTANTIATE_TEST_SUITE_P(Paths, SwiGlu, ::testing::Values(Isa::portable, Isa::avx512),
                         [](const auto& i) {
                             return i.param == Isa::avx512 ? "avx512" : "portable";
                         });

}  // namespace
}  // namespace weft::kernels
