// bf16 attention (attention_forward_bf16 / attention_backward_bf16) against the fp32 kernel on
// the same bf16 inputs (bit for bit: widening is exact and the bf16 entry runs the fp32 kernel)
// and against a float64 reference (tolerances below), forward and backward: causal, head sizes
// 32, 64 and 128, lengths that are not a multiple of the 64-row tile, grouped-query attention,
// a strided output, and query and key position offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/check.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention.hpp"
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

// Tolerances against float64: the output is rounded to bf16 once (half an ulp, 2^-9 relative,
// plus the fp32 kernel's ~1e-5), so 4e-3 of the largest value; the gradients read that rounded
// output for D = rowsum(dO·O), whose error of up to 2^-9·|D| enters every dS, so 1e-2. A wrong
// mask, head or offset errs by order 1.
void check(const Case& c) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " Tq=" + std::to_string(c.Tq) +
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

    // The fp32 kernel on the same values: the bf16 output is its output rounded, bit for bit.
    std::vector<float> out32(out.size()), lse32(lse.size());
    attention_forward(out32.data(), lse32.data(), q.wide.data(), k.wide.data(), v.wide.data(), s);
    size_t differ = 0;
    for (int64_t row = 0; row < s.B * s.Tq; ++row)
        for (int64_t x = 0; x < s.ldo; ++x) {
            const size_t i = size_t(row * s.ldo + x);
            differ += out[i] != (x < C ? fp32_to_bf16(out32[i]) : sentinel);
        }
    EXPECT_EQ(differ, 0u) << "out elements unlike the fp32 kernel's rounded (or padding touched)";
    EXPECT_EQ(std::memcmp(lse.data(), lse32.data(), lse.size() * sizeof(float)), 0) << "lse";

    const test::Reference r = test::reference(s, test::to_double(q.wide), test::to_double(k.wide),
                                              test::to_double(v.wide), test::to_double(dout.wide));
    EXPECT_LT(
        error([&](int64_t i) { return bf16_to_fp32(out[size_t(i)]); }, r.out, s.B * s.Tq, s.ldo, C),
        4e-3);

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
    double worst32 = 0;
    for (size_t i = 0; i < dq.size(); ++i)
        worst32 = std::max(worst32, double(std::abs(dq[i] - dq32[i])));
    for (size_t i = 0; i < dk.size(); ++i)
        worst32 = std::max(
            {worst32, double(std::abs(dk[i] - dk32[i])), double(std::abs(dv[i] - dv32[i]))});
    // The only difference is the +0.5 -0.5 round trip of the accumulation: 2^-24 of 0.5 and less.
    EXPECT_LT(worst32, 1e-6) << "gradients unlike the fp32 kernel's";
    auto at = [](const std::vector<float>& x) { return [&x](int64_t i) { return x[size_t(i)]; }; };
    EXPECT_LT(error(at(dq), r.dq, s.B * s.Tq, s.ldq, C), 1e-2) << "dq";
    EXPECT_LT(error(at(dk), r.dk, s.B * s.Tk, s.ldkv, CKV), 1e-2) << "dk";
    EXPECT_LT(error(at(dv), r.dv, s.B * s.Tk, s.ldkv, CKV), 1e-2) << "dv";
}

TEST(AttentionBf16, CausalHeadSizes) {
    for (int64_t HS : {32, 64, 128}) check({2, 100, 100, 4, 4, HS, 0, 0, 0});
}

TEST(AttentionBf16, GroupedQueryAndStrides) {
    check({2, 70, 70, 4, 2, 32, 0, 0, 3});
    check({1, 65, 65, 4, 1, 64, 0, 0, 0});
}

TEST(AttentionBf16, PositionOffsets) {
    check({2, 37, 100, 4, 2, 32, 63, 0, 0});  // KV-cache decoding: the queries after the cache
    check({1, 50, 80, 2, 2, 64, 90, 20, 1});  // a ring-attention block of later keys
    check({1, 30, 40, 2, 2, 32, 0, 50, 0});   // keys after every query: zeros, lse -inf
}

TEST(AttentionBf16, BadStridesAreNamed) {
    const AttentionShape s{1, 4, 4, 2, 8, 8, 16, 16};  // ldq 8 < NH*HS = 16
    std::vector<uint16_t> x(64);
    std::vector<float> lse(8);
    EXPECT_THROW(attention_forward_bf16(x.data(), lse.data(), x.data(), x.data(), x.data(), s),
                 Error);
}

}  // namespace
}  // namespace weft::kernels
