// bf16 matrix products: the precision setting, the fp32 -> bf16 rounding bit for bit, and gemm and
// the linear-layer products against double-precision references, both on the bf16-rounded
// operands (which they must match to fp32 accumulation error) and on the exact operands (which
// they must match to bf16 rounding error, and visibly differ from).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {
namespace {

using test::random_vector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// Each operand rounded to bf16 and back, as the bf16 products see it.
std::vector<float> rounded(const std::vector<float>& x, float scale = 1.0f) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_fp32(fp32_to_bf16(scale * x[i]));
    return r;
}

// What a product's result is judged against: the value in double, and the scale of its error,
// Σ_k |a_k b_k| (plus |bias| and |old C|): rounding each operand to bf16 moves a term by at most
// 2 · 2⁻⁹ of its size, so the result moves by at most 0.4% of this, whatever the cancellation.
struct Expected {
    std::vector<double> value, scale;
};

// C = alpha · op(A) op(B) + beta · C0 (+ bias) on [M, N], C0 and the result compact (ldc = N).
Expected reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const std::vector<float>& A, int64_t lda, const std::vector<float>& B,
                   int64_t ldb, float beta, const std::vector<float>& C0,
                   const float* bias = nullptr) {
    Expected e{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double t = double(ta ? A[k * lda + m] : A[m * lda + k]) *
                                 double(tb ? B[n * ldb + k] : B[k * ldb + n]);
                acc += t;
                mag += std::abs(t);
            }
            double v = alpha * acc, s = std::abs(alpha) * mag;
            if (beta != 0.0f) v += C0[m * N + n], s += std::abs(C0[m * N + n]);
            if (bias) v += bias[n], s += std::abs(bias[n]);
            e.value[m * N + n] = v;
            e.scale[m * N + n] = s;
        }
    return e;
}

// max over elements of |got - want| / scale.
double worst_error(const std::vector<float>& got, const Expected& want) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - want.value[i]) / (want.scale[i] + 1e-30));
    return worst;
}

// Against the bf16-rounded operands: what remains is fp32 accumulation (products of two bf16
// are exact in fp32; a sum of K ≤ 200 terms errs by at most ~K · 2⁻²⁴ of the scale).
constexpr double kRoundedTol = 2e-5;
// Against the exact operands: bf16 rounding, at most 2 · 2⁻⁹ ≈ 0.4% of the scale.
constexpr double kExactTol = 1e-2;
// ... and it must be visible: a product that ignored the bf16 setting would err by ~1e-7.
constexpr double kVisible = 1e-4;

TEST(MatmulPrecision, SettingRoundTripsAndParses) {
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32) << "fp32 must be the default";
    set_matmul_precision(MatmulPrecision::bf16);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16);
    // Visible from another thread: the setting is process-wide.
    MatmulPrecision seen = MatmulPrecision::fp32;
    std::thread([&] { seen = matmul_precision(); }).join();
    EXPECT_EQ(seen, MatmulPrecision::bf16);
    set_matmul_precision(MatmulPrecision::fp32);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32);

    EXPECT_EQ(parse_matmul_precision("fp32"), MatmulPrecision::fp32);
    EXPECT_EQ(parse_matmul_precision("bf16"), MatmulPrecision::bf16);
    for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::bf16})
        EXPECT_EQ(parse_matmul_precision(matmul_precision_name(p)), p);
    try {
        parse_matmul_precision("fp16");
        ADD_FAILURE() << "fp16 was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'fp16'"), std::string::npos) << e.what();
    }
    {
        MatmulPrecisionScope scope(MatmulPrecision::bf16);
        EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16);
    }
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32) << "the scope must restore fp32";
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
    // 1 + 2⁻⁸ is halfway between 1 (even) and 1 + 2⁻⁷ (odd): to 1.
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000)), 0x3f80);
    // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶ (even): up.
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000)), 0x3f82);
    // Just above and below a half: nearest.
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f817fff)), 0x3f81);
    // The largest float rounds up to infinity; infinities and signed zeros stay.
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    // Denormals are zero (as vcvtneps2bf16 treats them), keeping their sign.
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00400000)), 0x0000);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x80000001)), 0x8000);
    // A NaN stays a NaN even when its payload is only in the dropped bits.
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7f800001)))));
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(kNaN))));
    EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
}

// The AVX512-BF16 and portable conversions give the same bits, for every block shape the
// products use (contiguous, strided, tails of every length) and with a scale.
class Bf16Convert : public test::IsaTest {};

TEST_P(Bf16Convert, MatchesScalarRoundingBitForBit) {
    std::vector<float> src = random_vector(70000, 3, 3.0f);
    // Specials and exact ties in the first elements.
    const uint32_t specials[] = {0x3f808000, 0x3f818000, 0x00400000, 0x80000001,
                                 0x7f800000, 0xff800000, 0x7f800001, 0x7f7fffff};
    for (size_t i = 0; i < std::size(specials); ++i) src[i] = from_bits(specials[i]);
    struct Shape {
        int64_t rows, cols, ld;
    };
    for (Shape s : {Shape{1, 70000, 70000}, Shape{1, 37, 37}, Shape{200, 300, 300},
                    Shape{129, 17, 31}, Shape{300, 200, 233}, Shape{3, 1, 5}})
        for (float scale : {1.0f, -0.5f}) {
            std::vector<uint16_t> got(size_t(s.rows * s.cols), 0xdead);
            convert_fp32_to_bf16(got.data(), src.data(), s.rows, s.cols, s.ld, scale);
            int wrong = 0;
            for (int64_t r = 0; r < s.rows; ++r)
                for (int64_t c = 0; c < s.cols; ++c) {
                    const uint16_t want = fp32_to_bf16(scale * src[r * s.ld + c]);
                    const uint16_t h = got[r * s.cols + c];
                    // NaN payloads may differ; NaN-ness may not.
                    const bool same =
                        std::isnan(bf16_to_fp32(want)) ? std::isnan(bf16_to_fp32(h)) : h == want;
                    if (!same && ++wrong <= 3)
                        ADD_FAILURE() << "rows=" << s.rows << " cols=" << s.cols << " ld=" << s.ld
                                      << " scale=" << scale << " [" << r << "," << c
                                      << "]: " << std::hex << h << " want " << want;
                }
            EXPECT_EQ(wrong, 0);
        }
}

// The rounding with the column sums on the way (a product's output gradient and its bias
// gradient): the rounding's bits, and the sums over 64-row blocks and then the blocks in order,
// on 1 to 3 threads. Shapes with partial blocks and tails of lanes.
TEST_P(Bf16Convert, SumColumnsGivesTheRoundingAndBlockOrderSums) {
    struct Shape {
        int64_t rows, cols;
    };
    for (Shape s : {Shape{1, 1}, Shape{65, 37}, Shape{130, 300}, Shape{300, 768 + 9}}) {
        const int64_t n = s.rows * s.cols;
        const std::vector<float> src = random_vector(size_t(n), 4, 2.0f);
        const std::vector<float> sum0 = random_vector(size_t(s.cols), 5);
        std::vector<uint16_t> want(static_cast<size_t>(n));
        convert_fp32_to_bf16(want.data(), src.data(), s.rows, s.cols, s.cols);
        std::vector<float> want_sum = sum0;
        for (int64_t c = 0; c < s.cols; ++c) {
            float total = 0.0f;
            for (int64_t b0 = 0; b0 < s.rows; b0 += 64) {
                float block = 0.0f;
                for (int64_t m = b0; m < std::min(s.rows, b0 + 64); ++m)
                    block += src[m * s.cols + c];
                total += block;
            }
            want_sum[c] += total;
        }
        const int initial = omp_get_max_threads();
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            std::vector<uint16_t> got(size_t(n), 0xdead);
            std::vector<float> sum = sum0;
            convert_fp32_to_bf16_sum_columns(got.data(), sum.data(), src.data(), s.rows, s.cols);
            EXPECT_EQ(got, want) << s.rows << "x" << s.cols << ", " << threads << " threads";
            EXPECT_EQ(sum, want_sum) << s.rows << "x" << s.cols << ", " << threads << " threads";
        }
        omp_set_num_threads(initial);
    }
}

// Widening is exact: every bit pattern (NaNs, infinities, signed zeros, denormal bf16 values)
// lands in the top half, and the sum form adds exactly that; lengths with tails, and one large
// enough to be split over threads, on 1 to 3 threads.
TEST(Bf16Widen, IsExactForEveryBitPatternAndAddsIt) {
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
    const std::vector<float> base = random_vector(all.size(), 6, 4.0f);
    const int initial = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        for (int64_t n : {int64_t(1), int64_t(17), int64_t(1000), int64_t(65536)}) {
            std::vector<float> got(size_t(n), 7.0f), sum(base.begin(), base.begin() + n);
            convert_bf16_to_fp32(got.data(), all.data(), n);
            add_bf16_to_fp32(sum.data(), all.data(), n);
            int wrong = 0;
            for (int64_t i = 0; i < n; ++i) {
                uint32_t bits;
                std::memcpy(&bits, &got[size_t(i)], sizeof bits);
                const float plus = base[size_t(i)] + from_bits(uint32_t(all[size_t(i)]) << 16);
                const bool sum_ok =
                    std::isnan(plus) ? std::isnan(sum[size_t(i)]) : sum[size_t(i)] == plus;
                if ((bits != uint32_t(all[size_t(i)]) << 16 || !sum_ok) && ++wrong <= 3)
                    ADD_FAILURE() << "n=" << n << " threads=" << threads << " [" << i
                                  << "]: " << std::hex << bits << " from " << all[size_t(i)];
            }
            EXPECT_EQ(wrong, 0) << "n=" << n << " threads=" << threads;
        }
    }
    omp_set_num_threads(initial);
}

INSTANTIATE_TEST_SUITE_P(Isa, Bf16Convert, ::testing::Values(Isa::portable, Isa::avx512),
                         [](const auto& info) {
                             return info.param == Isa::avx512 ? "avx512" : "portable";
                         });

TEST(GemmBf16, MatchesRoundedReferenceForAllTransposesStridesAndBetas) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    struct Case {
        int64_t M, N, K, pad;
    };
    uint64_t seed = 100;
    for (Case c : {Case{1, 1, 1, 0}, Case{37, 29, 53, 3}, Case{64, 48, 17, 0}, Case{5, 130, 200, 7},
                   Case{131, 67, 96, 16}})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (float beta : {0.0f, 1.0f})
                    for (float alpha : {1.0f, -0.5f}) {
                        const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
                        const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
                        const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad;
                        const int64_t ldc = c.N + c.pad;
                        auto A = random_vector(size_t(a_rows * lda), seed++);
                        auto B = random_vector(size_t(b_rows * ldb), seed++);
                        auto C0 = random_vector(size_t(c.M * c.N), seed++);
                        // C in its strided layout; padding must survive, and beta = 0 must not
                        // read C (NaN).
                        std::vector<float> C(size_t(c.M * ldc), -7.0f);
                        for (int64_t m = 0; m < c.M; ++m)
                            for (int64_t n = 0; n < c.N; ++n)
                                C[m * ldc + n] = beta == 0.0f ? kNaN : C0[m * c.N + n];
                        gemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta,
                             C.data(), ldc);
                        std::vector<float> got(size_t(c.M * c.N));
                        bool pad_ok = true;
                        for (int64_t m = 0; m < c.M; ++m)
                            for (int64_t n = 0; n < ldc; ++n) {
                                if (n < c.N)
                                    got[m * c.N + n] = C[m * ldc + n];
                                else
                                    pad_ok &= C[m * ldc + n] == -7.0f;
                            }
                        // alpha scales A before rounding.
                        const auto r = reference(ta, tb, c.M, c.N, c.K, 1.0f, rounded(A, alpha),
                                                 lda, rounded(B), ldb, beta, C0);
                        const auto x =
                            reference(ta, tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C0);
                        const std::string where = ::testing::PrintToString(
                            std::vector<int64_t>{c.M, c.N, c.K, c.pad, ta, tb, int64_t(beta)});
                        EXPECT_TRUE(pad_ok) << where << ": wrote outside [M, N] of C";
                        EXPECT_LT(worst_error(got, r), kRoundedTol) << where << " alpha=" << alpha;
                        EXPECT_LT(worst_error(got, x), kExactTol) << where << " alpha=" << alpha;
                        if (c.K > 1) {
                            EXPECT_GT(worst_error(got, x), kVisible)
                                << where << ": no bf16 rounding visible";
                        }
                    }
}

TEST(MatmulBf16, ForwardAndBackwardMatchReferences) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 75, K = 48, N = 61;  // odd sizes: no kernel block divides them
    auto inp = random_vector(size_t(M * K), 20);
    auto w = random_vector(size_t(N * K), 21);
    auto bias = random_vector(size_t(N), 22);
    auto dout = random_vector(size_t(M * N), 23);
    auto dinp0 = random_vector(size_t(M * K), 24);
    auto dw0 = random_vector(size_t(N * K), 25);
    auto db0 = random_vector(size_t(N), 26);
    const std::vector<float> none;

    // out = inp · wᵀ + bias: the bias is added in fp32.
    std::vector<float> out(size_t(M * N), kNaN);
    matmul_forward(out.data(), inp.data(), w.data(), bias.data(), M, K, N);
    auto r = reference(false, true, M, N, K, 1.0f, rounded(inp), K, rounded(w), K, 0.0f, none,
                       bias.data());
    auto x = reference(false, true, M, N, K, 1.0f, inp, K, w, K, 0.0f, none, bias.data());
    EXPECT_LT(worst_error(out, r), kRoundedTol);
    EXPECT_LT(worst_error(out, x), kExactTol);
    EXPECT_GT(worst_error(out, x), kVisible);

    for (bool accumulate : {false, true}) {
        std::vector<float> dinp = accumulate ? dinp0 : std::vector<float>(size_t(M * K), kNaN);
        auto dw = dw0, db = db0;
        matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M, K,
                        N, accumulate);
        // dinp = dout · w (+ dinp0), dw = dw0 + doutᵀ · inp: accumulated in fp32.
        auto rd = reference(false, false, M, K, N, 1.0f, rounded(dout), N, rounded(w), K,
                            accumulate ? 1.0f : 0.0f, dinp0);
        auto xd =
            reference(false, false, M, K, N, 1.0f, dout, N, w, K, accumulate ? 1.0f : 0.0f, dinp0);
        auto rw =
            reference(true, false, N, K, M, 1.0f, rounded(dout), N, rounded(inp), K, 1.0f, dw0);
        auto xw = reference(true, false, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dw0);
        EXPECT_LT(worst_error(dinp, rd), kRoundedTol) << "accumulate=" << accumulate;
        EXPECT_LT(worst_error(dinp, xd), kExactTol) << "accumulate=" << accumulate;
        EXPECT_GT(worst_error(dinp, xd), kVisible) << "accumulate=" << accumulate;
        EXPECT_LT(worst_error(dw, rw), kRoundedTol);
        EXPECT_LT(worst_error(dw, xw), kExactTol);
        EXPECT_GT(worst_error(dw, xw), kVisible);
        // dbias is a sum of the fp32 dout: no rounding at all.
        for (int64_t n = 0; n < N; ++n) {
            double want = db0[n];
            for (int64_t m = 0; m < M; ++m) want += dout[m * N + n];
            EXPECT_NEAR(db[n], want, 1e-4) << "dbias[" << n << "]";
        }
        // Each output alone gives the same bits as all three together.
        std::vector<float> dinp1 = accumulate ? dinp0 : std::vector<float>(size_t(M * K), kNaN);
        matmul_backward(dinp1.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), M, K, N,
                        accumulate);
        EXPECT_EQ(dinp1, dinp);
        auto dw1 = dw0;
        matmul_backward(nullptr, dw1.data(), nullptr, dout.data(), inp.data(), nullptr, M, K, N,
                        false);
        EXPECT_EQ(dw1, dw);
    }
}

// A layer whose output is only kept as bf16 has the product write it rounded: the same values as
// rounding matmul_forward_bf16_input's fp32 output, to within one bf16 step where oneDNN's
// fp32 sums differ in their last bits.
TEST(MatmulBf16, Bf16OutputIsTheRoundedFp32Output) {
    if (!bf16_products_native()) GTEST_SKIP() << "bf16 products are emulated on this CPU";
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 75, K = 48, N = 61;
    const auto inp = random_vector(size_t(M * K), 30), w = random_vector(size_t(N * K), 31),
               bias = random_vector(size_t(N), 32);
    std::vector<uint16_t> inp16(inp.size()), out16(size_t(M * N), 0xffff), want16(out16.size());
    convert_fp32_to_bf16(inp16.data(), inp.data(), M, K, K);
    std::vector<float> out(size_t(M * N));
    matmul_forward_bf16_input(out.data(), inp16.data(), w.data(), bias.data(), M, K, N);
    convert_fp32_to_bf16(want16.data(), out.data(), M, N, N);
    matmul_forward_bf16_in_out(out16.data(), inp16.data(), w.data(), bias.data(), M, K, N);
    int64_t same = 0;
    for (size_t i = 0; i < out16.size(); ++i) {
        const float got = bf16_to_fp32(out16[i]), want = bf16_to_fp32(want16[i]);
        ASSERT_LE(std::abs(got - want), std::abs(want) / 128.0f) << i;
        same += out16[i] == want16[i];
    }
    EXPECT_GE(same, int64_t(out16.size()) * 99 / 100);
}

// The backward whose input gradient is written in bf16 by the product: within one bf16 ulp of
// rounding the fp32 gradient, the same bits almost everywhere; the weight and bias gradients
// those of the fp32-gradient backward.
TEST(MatmulBf16, Bf16InputGradientIsTheRoundedFp32One) {
    if (!bf16_products_native()) GTEST_SKIP() << "bf16 products are emulated on this CPU";
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 75, K = 48, N = 61;
    const auto inp = random_vector(size_t(M * K), 37), w = random_vector(size_t(N * K), 38),
               dout = random_vector(size_t(M * N), 39);
    std::vector<uint16_t> inp16(inp.size()), got16(size_t(M * K), 0xffff), want16(got16.size());
    convert_fp32_to_bf16(inp16.data(), inp.data(), M, K, K);
    std::vector<float> dinp(size_t(M * K)), want_dw(size_t(N * K), 0.5f),
        got_dw = want_dw, want_db(size_t(N), 0.25f), got_db = want_db;
    matmul_backward_bf16_input(dinp.data(), want_dw.data(), want_db.data(), dout.data(),
                               inp16.data(), w.data(), M, K, N, false);
    convert_fp32_to_bf16(want16.data(), dinp.data(), M, K, K);
    matmul_backward_bf16_in_out(got16.data(), got_dw.data(), got_db.data(), dout.data(),
                                inp16.data(), w.data(), M, K, N);
    EXPECT_EQ(got_dw, want_dw);
    EXPECT_EQ(got_db, want_db);
    int64_t same = 0;
    for (size_t i = 0; i < got16.size(); ++i) {
        const float got = bf16_to_fp32(got16[i]), want = bf16_to_fp32(want16[i]);
        ASSERT_LE(std::abs(got - want), std::abs(want) / 128.0f) << i;
        same += got16[i] == want16[i];
    }
    EXPECT_GE(same, int64_t(got16.size()) * 99 / 100);
}

// The backward on a dout its producer already rounded: the bits of the backward that rounds the
// fp32 dout itself (the bias aside), natively or emulated.
TEST(MatmulBf16, RoundedDoutGivesTheSameBits) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 75, K = 48, N = 61;
    const auto inp = random_vector(size_t(M * K), 33), w = random_vector(size_t(N * K), 34),
               dout = random_vector(size_t(M * N), 35), dw0 = random_vector(size_t(N * K), 36);
    std::vector<uint16_t> inp16(inp.size()), dout16(dout.size());
    convert_fp32_to_bf16(inp16.data(), inp.data(), M, K, K);
    convert_fp32_to_bf16(dout16.data(), dout.data(), M, N, N);
    std::vector<float> want_dinp(size_t(M * K)), got_dinp(want_dinp.size(), 7.0f), want_dw = dw0,
                                                                                   got_dw = dw0;
    matmul_backward_bf16_input(want_dinp.data(), want_dw.data(), nullptr, dout.data(), inp16.data(),
                               w.data(), M, K, N, false);
    matmul_backward_bf16_dout(got_dinp.data(), got_dw.data(), dout16.data(), inp16.data(), w.data(),
                              M, K, N, false);
    EXPECT_EQ(got_dinp, want_dinp);
    EXPECT_EQ(got_dw, want_dw);
}

TEST(MatmulBf16, ScratchIsReusedAcrossCalls) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 64, K = 96, N = 80;
    auto inp = random_vector(size_t(M * K), 1), w = random_vector(size_t(N * K), 2);
    std::vector<float> out(size_t(M * N));
    std::vector<float> dinp(size_t(M * K)), dw(size_t(N * K), 0.0f);
    matmul_forward(out.data(), inp.data(), w.data(), nullptr, M, K, N);
    matmul_backward(dinp.data(), dw.data(), nullptr, out.data(), inp.data(), w.data(), M, K, N,
                    false);
    const int64_t held = matmul_bf16_scratch_bytes();
    EXPECT_GT(held, 0);
    for (int i = 0; i < 3; ++i) {
        matmul_forward(out.data(), inp.data(), w.data(), nullptr, M / 2, K, N);
        matmul_backward(dinp.data(), dw.data(), nullptr, out.data(), inp.data(), w.data(), M, K, N,
                        false);
    }
    EXPECT_EQ(matmul_bf16_scratch_bytes(), held) << "same or smaller shapes must not reallocate";
}

int64_t conversions(const std::vector<ProfileEntry>& v) {
    for (const ProfileEntry& e : v)
        if (e.name == "bf16_convert") return e.calls;
    return 0;
}

// The classifier's pattern: one table read by a forward (as Bᵀ) and a backward product (as B),
// and one block read as A and as Aᵀ. Pinned, each is rounded once, with the same result.
TEST(MatmulBf16, OperandScopeConvertsOnceAndGivesTheSameBits) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t R = 40, V = 75, C = 24;
    auto x = random_vector(size_t(R * C), 1), table = random_vector(size_t(V * C), 2);
    auto run = [&](bool pinned, std::vector<float>& logits, std::vector<float>& dx,
                   std::vector<float>& dtable) {
        std::optional<Bf16OperandScope> pin_table;
        if (pinned) pin_table.emplace(table.data(), V, C, C);
        gemm(false, true, R, V, C, 1.0f, x.data(), C, table.data(), C, 0.0f, logits.data(), V);
        std::optional<Bf16OperandScope> pin_logits;
        if (pinned) pin_logits.emplace(logits.data(), R, V, V);
        gemm(false, false, R, C, V, 1.0f, logits.data(), V, table.data(), C, 0.0f, dx.data(), C);
        gemm(true, false, V, C, R, 1.0f, logits.data(), V, x.data(), C, 1.0f, dtable.data(), C);
    };
    std::vector<float> l0(size_t(R * V)), dx0(size_t(R * C)), dt0(size_t(V * C), 0.0f);
    std::vector<float> l1 = l0, dx1 = dx0, dt1 = dt0;
    profile_start();
    run(false, l0, dx0, dt0);
    const int64_t plain = conversions(profile_stop());
    profile_start();
    run(true, l1, dx1, dt1);
    const int64_t pinned = conversions(profile_stop());
    EXPECT_EQ(plain, 6);  // x, table; logits, table; logits, x
    // Pinned: logits once, x twice, and the table once per use. Natively the table is read as B
    // in two layouts, so it is packed twice (each pass rounds too); emulated, one compact copy.
    EXPECT_EQ(pinned, bf16_products_native() ? 5 : 4);
    EXPECT_EQ(l1, l0);
    EXPECT_EQ(dx1, dx0);
    EXPECT_EQ(dt1, dt0);

    // Outside the scope the table is read afresh; with fp32 precision a scope does nothing.
    std::vector<float> out(size_t(R * V)), again(size_t(R * V));
    {
        Bf16OperandScope pin(table.data(), V, C, C);
        gemm(false, true, R, V, C, 1.0f, x.data(), C, table.data(), C, 0.0f, out.data(), V);
    }
    for (float& t : table) t *= 2.0f;
    gemm(false, true, R, V, C, 1.0f, x.data(), C, table.data(), C, 0.0f, again.data(), V);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(again[i], 2.0f * out[i]) << i;
    set_matmul_precision(MatmulPrecision::fp32);
    Bf16OperandScope unused(table.data(), V, C, C);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32);
}

TEST(MatmulBf16, Fp32SettingIsUnaffected) {
    // After bf16 products, fp32 is exact to fp32 rounding again (the setting really switches).
    { MatmulPrecisionScope bf16(MatmulPrecision::bf16); }
    const int64_t M = 33, K = 40, N = 24;
    auto inp = random_vector(size_t(M * K), 5), w = random_vector(size_t(N * K), 6);
    std::vector<float> out(size_t(M * N));
    matmul_forward(out.data(), inp.data(), w.data(), nullptr, M, K, N);
    const std::vector<float> none;
    auto x = reference(false, true, M, N, K, 1.0f, inp, K, w, K, 0.0f, none);
    EXPECT_LT(worst_error(out, x), 1e-6);
}

}  // namespace
}  // namespace weft::kernels
