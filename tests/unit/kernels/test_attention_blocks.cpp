// The merge of partial attention results by their log-sum-exps (attention_merge.hpp), which
// context parallelism's ring attention needs (docs/context_parallel.md), against the formula in
// double precision, and its handling of fully masked sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/attention_merge.hpp"

namespace weft::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max |a - b| relative to max |b| but never to less than 0.1 (as test_attention.cpp): a wrong
// mask or a lost block gives errors of order 1. Where b is -inf, a must be -inf exactly; a NaN
// anywhere is an infinite error.
double error(const std::vector<float>& a, const std::vector<double>& b) {
    double worst = 0, size = 0.1;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i])) return INFINITY;
        if (std::isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        worst = std::max(worst, std::abs(a[i] - b[i]));
        size = std::max(size, std::abs(b[i]));
    }
    if (std::getenv("WEFT_TEST_VERBOSE")) std::printf("  error %.3g of %.3g\n", worst, size);
    return worst / size;
}

// The message of the Error f throws.
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

// The merge alone, against the formula in double: weights that would overflow a naive
// exp(lse) (lse = ±100), and sides of equal weight. Within 2e-5 relative: a float lse near 100
// is rounded by up to 4e-6 (half an ulp), and that absolute error enters every weight exp(lse_i
// - lse) as a relative one (2.2e-6 seen here); a wrong weight is off by order 1.
TEST(AttentionMerge, MatchesTheFormulaInDouble) {
    const int64_t B = 1, T = 4, NH = 2, HS = 5, C = NH * HS;
    const MergeShape s{B, T, NH, HS, C, C};
    auto a = test::random_vector(B * T * C, 41), b = test::random_vector(B * T * C, 42);
    std::vector<float> la = {100.0f, -100.0f, 3.0f, 0.5f, 88.0f, 7.0f, -1.0f, 2.0f};
    std::vector<float> lb = {99.0f, -100.0f, -40.0f, 0.5f, 90.0f, 7.5f, 30.0f, -2.0f};
    std::vector<float> out = a, lse = la;
    attention_merge(out.data(), lse.data(), b.data(), lb.data(), s);
    std::vector<double> want(out.size()), want_lse(lse.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < NH; ++h) {
            const size_t l = size_t(h * T + t);
            const double L = std::log(std::exp(double(la[l])) + std::exp(double(lb[l])));
            want_lse[l] = L;
            for (int64_t d = 0; d < HS; ++d) {
                const size_t i = size_t(t * C + h * HS + d);
                want[i] = a[i] * std::exp(la[l] - L) + b[i] * std::exp(lb[l] - L);
            }
        }
    EXPECT_LT(error(out, want), 2e-5);
    EXPECT_LT(error(lse, want_lse), 2e-5);
}

TEST(AttentionMerge, MaskedSidesGiveNoNaN) {
    const int64_t HS = 3;
    const MergeShape s{1, 4, 1, HS, HS, HS};
    // Rows: running empty + part, running + empty part, both empty, running empty + empty part.
    std::vector<float> out = {NAN, NAN, NAN, 1, 2, 3, NAN, NAN, NAN, 4, 5, 6};
    std::vector<float> lse = {kNegInf, 0.25f, kNegInf, kNegInf};
    const std::vector<float> part = {7, 8, 9, NAN, NAN, NAN, NAN, NAN, NAN, 1, 1, 1};
    const std::vector<float> part_lse = {1.5f, kNegInf, kNegInf, kNegInf};
    attention_merge(out.data(), lse.data(), part.data(), part_lse.data(), s);
    EXPECT_EQ(out, (std::vector<float>{7, 8, 9, 1, 2, 3, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(lse, (std::vector<float>{1.5f, 0.25f, kNegInf, kNegInf}));
}

TEST(AttentionMerge, BadShapeIsAnError) {
    float x = 0;
    EXPECT_NE(error_of([&] {
                  attention_merge(&x, &x, &x, &x, {1, 1, 2, 8, 16, 15});
              }).find("ldo=16, ldp=15 must be at least NH*HS=16"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  attention_merge(&x, &x, &x, &x, {1, 1, 2, 0, 16, 16});
              }).find("HS=0"),
              std::string::npos);
}

}  // namespace
}  // namespace weft::kernels
