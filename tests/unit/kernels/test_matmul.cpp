// gemm and the linear-layer products against naive double-precision references.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "support/check.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/gemm_peak.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::kernels {
namespace {

using test::max_rel_diff;
using test::random_vector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Dot products of ≤ 200 unit normals are O(10) with fp32 rounding errors of ~1e-5 absolute
// (seen up to 5e-6): require |got - want| <= 1e-4 * max(|want|, 1), i.e. an atol of 1 in
// max_rel_diff, so that results which cancel to near zero are judged by the operands' scale.
constexpr double kTol = 1e-4;
constexpr double kAtol = 1.0;

// C = alpha * op(A) op(B) + beta * C on the logical [M, N] block, all in double.
std::vector<float> reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const std::vector<float>& A, int64_t lda,
                                  const std::vector<float>& B, int64_t ldb, float beta,
                                  std::vector<float> C, int64_t ldc) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += double(ta ? A[k * lda + m] : A[m * lda + k]) *
                       double(tb ? B[n * ldb + k] : B[k * ldb + n]);
            float& c = C[m * ldc + n];
            c = float(alpha * acc + (beta == 0.0f ? 0.0 : double(beta) * c));
        }
    return C;
}

struct GemmCase {
    int64_t M, N, K, pad;  // pad: extra elements per row of every operand
};

// One product through gemm against the reference: A stored as [M,K] or, transposed, [K,M];
// likewise B. Padding must stay as it is; with beta = 0, C must not be read.
void check_gemm(const GemmCase& c, bool ta, bool tb, float alpha, float beta, uint64_t& seed) {
    int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
    int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
    int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
    auto A = random_vector(size_t(a_rows * lda), seed++);
    auto B = random_vector(size_t(b_rows * ldb), seed++);
    auto C = random_vector(size_t(c.M * ldc), seed++);
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = c.N; n < ldc; ++n) C[m * ldc + n] = 12345.0f;
    if (beta == 0.0f)
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) C[m * ldc + n] = kNaN;
    auto want = reference_gemm(ta, tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
    SCOPED_TRACE(::testing::Message()
                 << "M=" << c.M << " N=" << c.N << " K=" << c.K << " pad=" << c.pad << " ta=" << ta
                 << " tb=" << tb << " beta=" << beta << " alpha=" << alpha);
    EXPECT_LT(max_rel_diff(C.data(), want.data(), C.size(), kAtol), kTol);
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = c.N; n < ldc; ++n)
            ASSERT_EQ(C[m * ldc + n], 12345.0f) << "padding written";
}

TEST(Gemm, MatchesReferenceForAllTransposesStridesAndBetas) {
    const GemmCase cases[] = {
        {1, 1, 1, 0}, {37, 29, 53, 3}, {64, 48, 17, 0}, {5, 130, 200, 7}, {131, 67, 96, 16}};
    uint64_t seed = 1;
    for (const GemmCase& c : cases)
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (float beta : {0.0f, 1.0f})
                    for (float alpha : {1.0f, -0.5f}) check_gemm(c, ta, tb, alpha, beta, seed);
}

// Products large enough to be cut into one slab per thread (matmul.cpp's sgemm_slabs): slabs of
// rows (M >= N) and of whole 16-float vectors of columns (N > M), uneven over 2 and 3 threads,
// and on one thread the plain call, against the reference.
TEST(Gemm, SlabsPerThreadMatchReference) {
    const GemmCase cases[] = {{301, 173, 97, 5}, {93, 331, 149, 3}};
    const int initial = omp_get_max_threads();
    uint64_t seed = 100;
    for (const GemmCase& c : cases)
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            SCOPED_TRACE(::testing::Message() << threads << " threads");
            for (bool ta : {false, true})
                for (bool tb : {false, true})
                    for (float beta : {0.0f, 1.0f}) check_gemm(c, ta, tb, -0.5f, beta, seed);
        }
    omp_set_num_threads(initial);
}

TEST(Gemm, EmptyProducts) {
    std::vector<float> C = {1, 2, 3, 4};
    gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 1.0f, C.data(), 2);
    EXPECT_EQ(C, (std::vector<float>{1, 2, 3, 4}));  // K = 0, beta = 1: unchanged
    gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, C.data(), 2);
    EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));  // K = 0, beta = 0: zeros
    gemm(false, false, 0, 2, 3, 1.0f, nullptr, 3, nullptr, 2, 0.0f, nullptr, 2);  // M = 0: no-op
}

TEST(Gemm, RejectsBadArguments) {
    std::vector<float> A(16), B(16), C(16);
    EXPECT_THROW(gemm(false, false, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.5f, C.data(), 4),
                 Error);
    EXPECT_THROW(gemm(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
                 Error);
    EXPECT_THROW(gemm(true, false, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 3),
                 Error);
}

// Reference linear layer: out[M,N] = inp[M,K] · weight[N,K]ᵀ + bias.
std::vector<float> reference_forward(const std::vector<float>& inp, const std::vector<float>& w,
                                     const float* bias, int64_t M, int64_t K, int64_t N) {
    std::vector<float> out(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; ++k) acc += double(inp[m * K + k]) * w[n * K + k];
            out[m * N + n] = float(acc);
        }
    return out;
}

TEST(Matmul, ForwardWithAndWithoutBias) {
    for (auto [M, K, N] :
         {std::tuple<int64_t, int64_t, int64_t>{33, 40, 24}, {256, 192, 320}, {7, 1, 3}}) {
        auto inp = random_vector(size_t(M * K), 10);
        auto w = random_vector(size_t(N * K), 11);
        auto bias = random_vector(size_t(N), 12);
        for (bool with_bias : {false, true}) {
            const float* b = with_bias ? bias.data() : nullptr;
            std::vector<float> out(size_t(M * N), kNaN);
            matmul_forward(out.data(), inp.data(), w.data(), b, M, K, N);
            auto want = reference_forward(inp, w, b, M, K, N);
            EXPECT_LT(max_rel_diff(out.data(), want.data(), out.size(), kAtol), kTol)
                << "M=" << M << " K=" << K << " N=" << N << " bias=" << with_bias;
        }
    }
}

// Odd sizes that no kernel block divides, for both ways the weight gradient is computed: a layer
// that widens (N > K) takes it transposed through a scratch (matmul_backward_scratch_floats),
// one that narrows takes the direct product.
class MatmulBackward : public ::testing::TestWithParam<std::array<int64_t, 3>> {};

TEST_P(MatmulBackward, MatchesReferenceAndAccumulates) {
    const auto [M, K, N] = GetParam();
    EXPECT_EQ(matmul_backward_scratch_floats(K, N), N > K ? N * K : 0);
    auto inp = random_vector(size_t(M * K), 20);
    auto w = random_vector(size_t(N * K), 21);
    auto dout = random_vector(size_t(M * N), 22);
    auto dinp0 = random_vector(size_t(M * K), 23);
    auto dw0 = random_vector(size_t(N * K), 24);
    auto db0 = random_vector(size_t(N), 25);

    std::vector<double> dinp_ref(size_t(M * K), 0), dw_ref(size_t(N * K), 0), db_ref(size_t(N), 0);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double g = dout[m * N + n];
            db_ref[n] += g;
            for (int64_t k = 0; k < K; ++k) {
                dinp_ref[m * K + k] += g * w[n * K + k];
                dw_ref[n * K + k] += g * inp[m * K + k];
            }
        }
    auto plus = [](const std::vector<float>& a, const std::vector<double>& b) {
        std::vector<float> s(a.size());
        for (size_t i = 0; i < a.size(); ++i) s[i] = float(a[i] + b[i]);
        return s;
    };
    std::vector<float> zeros_k(size_t(M * K), 0.0f);
    auto want_dinp = plus(zeros_k, dinp_ref);
    auto want_dinp_acc = plus(dinp0, dinp_ref);
    auto want_dw = plus(dw0, dw_ref);
    auto want_db = plus(db0, db_ref);

    for (bool accumulate : {false, true}) {
        // Overwrite mode must not read dinp: start from NaN.
        std::vector<float> dinp = accumulate ? dinp0 : std::vector<float>(size_t(M * K), kNaN);
        auto dw = dw0;
        auto db = db0;
        matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M, K,
                        N, accumulate);
        const auto& want = accumulate ? want_dinp_acc : want_dinp;
        EXPECT_LT(max_rel_diff(dinp.data(), want.data(), dinp.size(), kAtol), kTol);
        EXPECT_LT(max_rel_diff(dw.data(), want_dw.data(), dw.size(), kAtol), kTol);
        EXPECT_LT(max_rel_diff(db.data(), want_db.data(), db.size(), kAtol), kTol);
    }

    // Each output on its own, the others null.
    std::vector<float> dinp(size_t(M * K), kNaN);
    matmul_backward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), M, K, N,
                    false);
    EXPECT_LT(max_rel_diff(dinp.data(), want_dinp.data(), dinp.size(), kAtol), kTol);
    auto dw = dw0;
    matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), nullptr, M, K, N, false);
    EXPECT_LT(max_rel_diff(dw.data(), want_dw.data(), dw.size(), kAtol), kTol);
    auto db = db0;
    matmul_backward(nullptr, nullptr, db.data(), dout.data(), nullptr, nullptr, M, K, N, false);
    EXPECT_LT(max_rel_diff(db.data(), want_db.data(), db.size(), kAtol), kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulBackward,
                         ::testing::Values(std::array<int64_t, 3>{75, 48, 61},
                                           std::array<int64_t, 3>{75, 61, 48},
                                           std::array<int64_t, 3>{33, 20, 70},
                                           std::array<int64_t, 3>{40, 32, 96}));

// Central differences of L = Σ_{m,n} w[m,n] · out[m,n] with out = matmul_forward(inp, weight,
// bias) against matmul_backward with dout = w. L is linear in every input, so the central
// difference has no truncation error: what remains is the fp32 rounding of out (~1e-7 per output,
// a handful of outputs per perturbed input) divided by 2h = 0.02, ~1e-5. Required:
// |fd - analytic| <= 1e-3 * (1 + |analytic|) with h = 1e-2.
TEST(Matmul, BackwardMatchesFiniteDifferences) {
    const int64_t M = 5, K = 7, N = 6;
    auto inp = random_vector(size_t(M * K), 30);
    auto weight = random_vector(size_t(N * K), 31);
    auto bias = random_vector(size_t(N), 32);
    const auto w = random_vector(size_t(M * N), 33);

    std::vector<float> out(size_t(M * N));
    auto loss = [&] {
        matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), M, K, N);
        double acc = 0;
        for (size_t i = 0; i < out.size(); ++i) acc += double(w[i]) * out[i];
        return acc;
    };

    std::vector<float> dinp(size_t(M * K), kNaN);  // overwritten: must not be read
    std::vector<float> dweight(size_t(N * K), 0.0f), dbias(size_t(N), 0.0f);
    matmul_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(),
                    M, K, N, /*accumulate_dinp=*/false);

    const float h = 1e-2f;
    auto check = [&](const char* name, std::vector<float>& x, const std::vector<float>& analytic) {
        std::vector<size_t> all(x.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = i;
        const auto fd = test::finite_difference(x, loss, all, h);
        for (size_t i = 0; i < x.size(); ++i)
            EXPECT_LE(std::abs(fd[i] - analytic[i]), 1e-3 * (1.0 + std::abs(analytic[i])))
                << name << "[" << i << "]: finite difference " << fd[i] << ", analytic "
                << analytic[i];
    };
    check("dinp", inp, dinp);
    check("dweight", weight, dweight);
    check("dbias", bias, dbias);
}

TEST(Matmul, PeakMeasurementIsPlausible) {
    double gflops = measure_gemm_peak_gflops(128, 0.01);
    EXPECT_TRUE(std::isfinite(gflops));
    EXPECT_GT(gflops, 0.1);
}

}  // namespace
}  // namespace weft::kernels
