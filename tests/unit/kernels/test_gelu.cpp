#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/kernels/gelu.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"

namespace wk = weft::kernels;
using weft::test::random_vector;

namespace {

const double kK = std::sqrt(2.0 / M_PI);

double gelu_ref(double x) {
    return 0.5 * x * (1.0 + std::tanh(kK * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
    const double t = std::tanh(kK * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kK * (1.0 + 3.0 * 0.044715 * x * x);
}

// Random values at scale 3 plus the saturated ends, where an exp can overflow.
std::vector<float> inputs(int64_t n, uint64_t seed) {
    auto x = random_vector(n, seed, 3.0f);
    const float ends[] = {-100.0f, -30.0f, -9.0f, 0.0f, 9.0f, 30.0f, 100.0f};
    for (size_t i = 0; i < std::size(ends) && i < x.size(); ++i) x[i] = ends[i];
    return x;
}

// |a - ref| ≤ 2e-6 · (1 + |ref|): relative for large values, absolute for the tiny ones of very
// negative inputs. Measured on a dense grid of [-20, 20]: 1e-7 forward, 1e-6 backward.
void expect_close(const std::vector<float>& a, const std::vector<double>& ref, const char* what) {
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_FALSE(std::isnan(a[i])) << what << "[" << i << "]";
        ASSERT_NEAR(a[i], ref[i], 2e-6 * (1.0 + std::abs(ref[i]))) << what << "[" << i << "]";
    }
}

// bias + the column sums of g [rows, cols] in the order the fused backwards state: each block of
// 64 rows summed, then the blocks in order.
std::vector<float> plus_block_sums(std::vector<float> bias, const std::vector<float>& g,
                                   int64_t rows, int64_t cols) {
    for (int64_t c = 0; c < cols; ++c) {
        float total = 0.0f;
        for (int64_t b0 = 0; b0 < rows; b0 += 64) {
            float block = 0.0f;
            for (int64_t m = b0; m < std::min(rows, b0 + 64); ++m) block += g[m * cols + c];
            total += block;
        }
        bias[c] += total;
    }
    return bias;
}

class Gelu : public weft::test::IsaTest {};

// Sizes with 1, 15 and 7 tail lanes, and one spanning several threaded blocks.
TEST_P(Gelu, MatchesDoubleReference) {
    for (int64_t n : {1, 15, 16, 17, 1000 + 7, 3 * 8192 + 5}) {
        const auto x = inputs(n, 1), dy = random_vector(n, 2);
        std::vector<double> f(n), d(n);
        for (int64_t i = 0; i < n; ++i) f[i] = gelu_ref(x[i]), d[i] = gelu_grad_ref(x[i]) * dy[i];

        std::vector<float> out(n), dinp(n, 123.0f);  // dinp is overwritten, not added to
        wk::gelu_forward(out.data(), x.data(), n);
        wk::gelu_backward(dinp.data(), x.data(), dy.data(), n);
        expect_close(out, f, "out");
        expect_close(dinp, d, "dinp");
    }
}

TEST_P(Gelu, BackwardMayAliasDout) {
    const int64_t n = 1000 + 3;
    const auto x = inputs(n, 3), dy = random_vector(n, 4);
    std::vector<float> separate(n), inplace = dy;
    wk::gelu_backward(separate.data(), x.data(), dy.data(), n);
    wk::gelu_backward(inplace.data(), x.data(), inplace.data(), n);
    EXPECT_EQ(inplace, separate);
}

// L = Σ w ⊙ gelu(x) with random w. Tolerance |fd - analytic| ≤ 1e-3 · (|analytic| + 0.1): with
// h = 1e-2, truncation is O(h² gelu''') ≈ 1e-5 and fp32 rounding of one output over 2h ≈ 1e-5.
TEST_P(Gelu, BackwardMatchesFiniteDifferences) {
    const int64_t n = 67;
    auto x = random_vector(n, 5, 2.0f);
    const auto w = random_vector(n, 6);
    std::vector<float> out(n);
    auto loss = [&] {
        wk::gelu_forward(out.data(), x.data(), n);
        double l = 0;
        for (int64_t i = 0; i < n; ++i) l += double(w[i]) * out[i];
        return l;
    };
    std::vector<float> dinp(n);
    wk::gelu_backward(dinp.data(), x.data(), w.data(), n);
    std::vector<size_t> all(n);
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const auto fd = weft::test::finite_difference(x, loss, all);
    for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(fd[i], dinp[i], 1e-3 * (std::abs(dinp[i]) + 0.1)) << "x[" << i << "]";
}

// The entries on a bf16 input (--dtype bf16 keeps the GELU's input so): bit for bit the fp32
// kernel on the widened input, the forward's output rounded to nearest even.
TEST_P(Gelu, Bf16InputGivesTheFp32KernelsBitsOnTheWidenedValues) {
    for (int64_t n : {1, 15, 17, 1000 + 7, 3 * 8192 + 5}) {
        const auto x = inputs(n, 7), dy = random_vector(n, 8);
        std::vector<uint16_t> x16(n), want16(n), out16(n, 0xffff);
        wk::convert_fp32_to_bf16(x16.data(), x.data(), 1, n, n);
        std::vector<float> wide(n), want(n), dinp(n, 123.0f), want_dinp(n);
        for (int64_t i = 0; i < n; ++i) wide[i] = wk::bf16_to_fp32(x16[i]);
        wk::gelu_forward(want.data(), wide.data(), n);
        wk::convert_fp32_to_bf16(want16.data(), want.data(), 1, n, n);
        wk::gelu_forward_bf16(out16.data(), x16.data(), n);
        EXPECT_EQ(out16, want16) << "n=" << n;

        wk::gelu_backward(want_dinp.data(), wide.data(), dy.data(), n);
        wk::gelu_backward_bf16_input(dinp.data(), x16.data(), dy.data(), n);
        EXPECT_EQ(dinp, want_dinp) << "n=" << n;
        std::vector<float> inplace = dy;  // dinp may alias dout
        wk::gelu_backward_bf16_input(inplace.data(), x16.data(), inplace.data(), n);
        EXPECT_EQ(inplace, want_dinp) << "n=" << n;
    }
}

// The backward that writes its gradient rounded and sums the bias gradient (GPT-2's fc under
// --dtype bf16): the bits of gelu_backward_bf16_input and then convert_fp32_to_bf16, and the bias
// gradient of that fp32 gradient summed in the stated order (64-row blocks, then the blocks), on
// one thread and on several. Widths with a tail of lanes, heights with a partial block.
TEST_P(Gelu, Bf16BackwardGivesTheRoundedGradientAndTheBiasSums) {
    const int64_t shapes[][2] = {{1, 1}, {3, 17}, {37, 256}, {65, 300}, {300, 3 * 256 + 9}};
    for (const auto& [rows, cols] : shapes) {
        const int64_t n = rows * cols;
        const auto x = inputs(n, 9), dy = random_vector(n, 10);
        std::vector<uint16_t> x16(n), want16(n);
        wk::convert_fp32_to_bf16(x16.data(), x.data(), 1, n, n);
        std::vector<float> dinp(n);
        wk::gelu_backward_bf16_input(dinp.data(), x16.data(), dy.data(), n);
        wk::convert_fp32_to_bf16(want16.data(), dinp.data(), 1, n, n);
        const auto bias0 = random_vector(cols, 11);
        const std::vector<float> want_db = plus_block_sums(bias0, dinp, rows, cols);
        const int initial = omp_get_max_threads();
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            std::vector<uint16_t> got16(n, 0xffff), no_bias(n, 0xffff);
            std::vector<float> got_db = bias0;
            wk::gelu_backward_bf16(got16.data(), got_db.data(), x16.data(), dy.data(), rows, cols);
            EXPECT_EQ(got16, want16) << rows << "x" << cols << ", " << threads << " threads";
            EXPECT_EQ(got_db, want_db) << rows << "x" << cols << ", " << threads << " threads";
            wk::gelu_backward_bf16(no_bias.data(), nullptr, x16.data(), dy.data(), rows, cols);
            EXPECT_EQ(no_bias, want16) << rows << "x" << cols << " without a bias";
        }
        omp_set_num_threads(initial);
    }
}

// gelu_backward_bias (GPT-2's fc in fp32): gelu_backward's bits, in place as the model calls it,
// and fc's bias gradient summed in the stated order (64-row blocks, then the blocks), on one
// thread and on several. Widths with a tail of lanes, heights with a partial block.
TEST_P(Gelu, BackwardWithBiasGivesTheGradientAndTheBiasSums) {
    const int64_t shapes[][2] = {{1, 1}, {3, 17}, {37, 256}, {65, 300}, {300, 3 * 256 + 9}};
    for (const auto& [rows, cols] : shapes) {
        const int64_t n = rows * cols;
        const auto x = inputs(n, 12), dy = random_vector(n, 13);
        std::vector<float> want(n);
        wk::gelu_backward(want.data(), x.data(), dy.data(), n);
        const auto bias0 = random_vector(cols, 14);
        const std::vector<float> want_db = plus_block_sums(bias0, want, rows, cols);
        const int initial = omp_get_max_threads();
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            std::vector<float> got = dy, got_db = bias0;
            wk::gelu_backward_bias(got.data(), got_db.data(), x.data(), got.data(), rows, cols);
            EXPECT_EQ(got, want) << rows << "x" << cols << ", " << threads << " threads";
            EXPECT_EQ(got_db, want_db) << rows << "x" << cols << ", " << threads << " threads";
        }
        omp_set_num_threads(initial);
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, Gelu, ::testing::Values(wk::Isa::portable, wk::Isa::avx512),
                         [](const auto& info) {
                             return info.param == wk::Isa::avx512 ? "avx512" : "portable";
                         });

}  // namespace
