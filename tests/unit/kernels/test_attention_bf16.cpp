// bf16 attention (attention_forward_bf16 / attention_backward_bf16) on every kernel path (IsaTest):
// the widened path against the fp32 kernel on the same bf16 inputs (bit for bit: widening is exact
// and it runs the fp32 kernel), the native AVX512-BF16 path (where this CPU has it) against the
// fp32 kernel within the roundings it adds, and both against a float64 reference (tolerances
// below), forward and backward: causal, head sizes 16 to 128 (and an odd one, which widens),
// lengths that are not a multiple of the 64-row tile, grouped-query attention, a strided output,
// and query and key position offsets, including blocks no query sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::kernels {
namespace {

struct Bf16Tensor {
    std::vector<uint16_t> bits;
    std::vector<float> wide;  // the same values in fp32 (exact)
};

Bf16Tensor random_bf16(size_t n, uint64_t seed) {
    Bf16Tensor t;
    const std::vector<float> x = test::random_vector(n, seed, 1.0f);
    for (float f : x) {
        t.bits.push_back(fp32_to_bf16(f));
        t.wide.push_back(bf16_to_fp32(t.bits.back()));
    }
    return t;
}

// max |a - b| over the first `cols` of each row, relative to max |b| (at least 0.1).
template <class A>
double error(const A& a, const std::vector<double>& b, int64_t rows, int64_t ld, int64_t cols) {
    double worst = 0, size = 0.1;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            worst = std::max(worst, std::abs(double(a(r * ld + c)) - b[size_t(r * ld + c)]));
            size = std::max(size, std::abs(b[size_t(r * ld + c)]));
        }
    return worst / size;
}

struct Case {
    int64_t B, Tq, Tk, NH, NKV, HS, q_pos0, k_pos0, pad;
};

// Tolerances against float64. Widened: the output is rounded to bf16 once (half an ulp, 2^-9
// relative, plus the fp32 kernel's ~1e-5), so 4e-3 of the largest value; the gradients read that
// rounded output for D = rowsum(dO·O), whose error of up to 2^-9·|D| enters every dS, so 1e-2.
// Native: P is rounded to bf16 before PV and dS before dQ and dK, 2^-9 relative on each term:
// sums of such terms with random signs err far less than their bound. Measured (each case prints
// its errors): native out at most 3.1e-3 (widened 2.9e-3 on the same case: the output's own
// rounding dominates), native gradients at most 3.8e-3. A wrong mask, head or offset errs by
// order 1.
constexpr double kOutTol = 4e-3, kGradTol = 1e-2;

// Which path ran, for the trace.
std::string path_name(int64_t HS) {
    return attention_bf16_native(HS) ? "native bf16"
                                     : std::string("widened on ") + isa_name(kernel_isa());
}

void check(const Case& c) {
    const bool native = attention_bf16_native(c.HS);
    SCOPED_TRACE(path_name(c.HS) + " B=" + std::to_string(c.B) + " Tq=" + std::to_string(c.Tq) +
                 " Tk=" + std::to_string(c.Tk) + " NH=" + std::to_string(c.NH) +
                 " NKV=" + std::to_string(c.NKV) + " HS=" + std::to_string(c.HS) +
                 " q_pos0=" + std::to_string(c.q_pos0) + " k_pos0=" + std::to_string(c.k_pos0));
    const int64_t C = c.NH * c.HS, CKV = c.NKV * c.HS;
    const AttentionShape s{
        c.B,           c.Tq,     c.Tk,  c.NH,    c.HS, C + c.pad, CKV + 2 * c.pad,
        C + 3 * c.pad, c.q_pos0, c.NKV, c.k_pos0};
    const Bf16Tensor q = random_bf16(size_t(s.B * s.Tq * s.ldq), 1),
                     k = random_bf16(size_t(s.B * s.Tk * s.ldkv), 2),
                     v = random_bf16(size_t(s.B * s.Tk * s.ldkv), 3),
                     dout = random_bf16(size_t(s.B * s.Tq * s.ldo), 4);

    const uint16_t sentinel = 0x1234;
    std::vector<uint16_t> out(size_t(s.B * s.Tq * s.ldo), sentinel);
    std::vector<float> lse(size_t(s.B * s.NH * s.Tq));
    attention_forward_bf16(out.data(), lse.data(), q.bits.data(), k.bits.data(), v.bits.data(), s);

    // The fp32 kernel on the same values: the widened output is its output rounded, bit for bit;
    // the native one within the tolerance of P's rounding. Padding is never written.
    std::vector<float> out32(out.size()), lse32(lse.size());
    attention_forward(out32.data(), lse32.data(), q.wide.data(), k.wide.data(), v.wide.data(), s);
    size_t differ = 0, padding = 0;
    double worst_lse = 0;
    for (int64_t row = 0; row < s.B * s.Tq; ++row)
        for (int64_t x = 0; x < s.ldo; ++x) {
            const size_t i = size_t(row * s.ldo + x);
            if (x >= C) {
                padding += out[i] != sentinel;
                continue;
            }
            differ += out[i] != fp32_to_bf16(out32[i]);
        }
    for (size_t i = 0; i < lse.size(); ++i)
        if (std::isinf(lse32[i]))
            EXPECT_EQ(lse[i], lse32[i]) << "lse of a row that sees no key, at " << i;
        else
            worst_lse = std::max(worst_lse, double(std::abs(lse[i] - lse32[i])));
    EXPECT_EQ(padding, 0u) << "padding past NH*HS written";
    const double out_vs32 = error([&](int64_t i) { return bf16_to_fp32(out[size_t(i)]); },
                                  test::to_double(out32), s.B * s.Tq, s.ldo, C);
    if (native) {
        // Scores are exact products summed in fp32, so the lse agrees to fp32 rounding.
        EXPECT_LT(worst_lse, 1e-4) << "lse";
        EXPECT_LT(out_vs32, kOutTol) << "out against the fp32 kernel";
    } else {
        EXPECT_EQ(differ, 0u) << "out elements unlike the fp32 kernel's rounded";
        EXPECT_EQ(std::memcmp(lse.data(), lse32.data(), lse.size() * sizeof(float)), 0) << "lse";
    }

    const test::Reference r = test::reference(s, test::to_double(q.wide), test::to_double(k.wide),
                                              test::to_double(v.wide), test::to_double(dout.wide));
    const double out_err =
        error([&](int64_t i) { return bf16_to_fp32(out[size_t(i)]); }, r.out, s.B * s.Tq, s.ldo, C);
    EXPECT_LT(out_err, kOutTol);

    // Backward accumulates into the given gradients; the fp32 kernel on the widened bf16 output.
    std::vector<float> dq(q.wide.size(), 0.5f), dk(k.wide.size(), 0.5f), dv(v.wide.size(), 0.5f);
    attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.bits.data(), q.bits.data(),
                            k.bits.data(), v.bits.data(), out.data(), lse.data(), s);
    std::vector<float> out_wide(out.size());
    for (size_t i = 0; i < out.size(); ++i) out_wide[i] = bf16_to_fp32(out[i]);
    std::vector<float> dq32(dq.size()), dk32(dk.size()), dv32(dv.size());
    attention_backward(dq32.data(), dk32.data(), dv32.data(), dout.wide.data(), q.wide.data(),
                       k.wide.data(), v.wide.data(), out_wide.data(), lse.data(), s);
    for (size_t i = 0; i < dq.size(); ++i) dq[i] -= 0.5f;
    for (size_t i = 0; i < dk.size(); ++i) dk[i] -= 0.5f, dv[i] -= 0.5f;
    if (!native) {
        double worst32 = 0;
        for (size_t i = 0; i < dq.size(); ++i)
            worst32 = std::max(worst32, double(std::abs(dq[i] - dq32[i])));
        for (size_t i = 0; i < dk.size(); ++i)
            worst32 = std::max(
                {worst32, double(std::abs(dk[i] - dk32[i])), double(std::abs(dv[i] - dv32[i]))});
        // The only difference is the +0.5 -0.5 round trip of the accumulation: 2^-24 of 0.5.
        EXPECT_LT(worst32, 1e-6) << "gradients unlike the fp32 kernel's";
    }
    auto at = [](const std::vector<float>& x) { return [&x](int64_t i) { return x[size_t(i)]; }; };
    const double dq_err = error(at(dq), r.dq, s.B * s.Tq, s.ldq, C);
    const double dk_err = error(at(dk), r.dk, s.B * s.Tk, s.ldkv, CKV);
    const double dv_err = error(at(dv), r.dv, s.B * s.Tk, s.ldkv, CKV);
    EXPECT_LT(dq_err, kGradTol) << "dq";
    EXPECT_LT(dk_err, kGradTol) << "dk";
    EXPECT_LT(dv_err, kGradTol) << "dv";
    // Padding of the gradients' strided rows is never written (it holds 0.5 - 0.5 = 0).
    for (int64_t row = 0; row < s.B * s.Tq; ++row)
        for (int64_t x = C; x < s.ldq; ++x) EXPECT_EQ(dq[size_t(row * s.ldq + x)], 0.0f);
    std::printf("  %s HS=%lld Tq=%lld: out %.2e (vs fp32 %.2e) dq %.2e dk %.2e dv %.2e\n",
                path_name(c.HS).c_str(), (long long)c.HS, (long long)c.Tq, out_err, out_vs32,
                dq_err, dk_err, dv_err);
}

class AttentionBf16 : public test::IsaTest {};

TEST_P(AttentionBf16, CausalHeadSizes) {
    for (int64_t HS : {16, 32, 64, 80, 128}) check({2, 100, 100, 4, 4, HS, 0, 0, 0});
    check({1, 64, 64, 2, 2, 15, 0, 0, 0});    // odd: widened on every path
    check({1, 257, 257, 2, 2, 64, 0, 0, 0});  // four tiles and one row
}

TEST_P(AttentionBf16, GroupedQueryAndStrides) {
    check({2, 70, 70, 4, 2, 32, 0, 0, 3});
    check({1, 65, 65, 4, 1, 64, 0, 0, 0});
}

TEST_P(AttentionBf16, PositionOffsets) {
    check({2, 37, 100, 4, 2, 32, 63, 0, 0});  // KV-cache decoding: the queries after the cache
    check({1, 50, 80, 2, 2, 64, 90, 20, 1});  // a ring-attention block of later keys
    check({1, 30, 40, 2, 2, 32, 0, 50, 0});   // keys after every query: zeros, lse -inf
    check({1, 77, 91, 2, 1, 64, 31, 4, 2});   // odd offsets: query tiles start mid-pair
}

TEST_P(AttentionBf16, BadStridesAreNamed) {
    const AttentionShape s{1, 4, 4, 2, 8, 8, 16, 16};  // ldq 8 < NH*HS = 16
    std::vector<uint16_t> x(64);
    std::vector<float> lse(8);
    EXPECT_THROW(attention_forward_bf16(x.data(), lse.data(), x.data(), x.data(), x.data(), s),
                 Error);
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionBf16, test::kAllIsas, test::isa_param_name);

}  // namespace
}  // namespace weft::kernels
