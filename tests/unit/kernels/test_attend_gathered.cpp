#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "weft/kernels/attend_gathered.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"

using namespace weft::kernels;

namespace {

struct Case {
    int64_t n, HS;
    std::vector<float> q, k, v;  // k and v: n rows of HS, gathered backwards (as a block table
                                 // may put positions anywhere)
    std::vector<const float*> keys, values;
};

Case make(int64_t n, int64_t HS, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    Case c{n,
           HS,
           std::vector<float>(size_t(HS)),
           std::vector<float>(size_t(n * HS)),
           std::vector<float>(size_t(n * HS)),
           {},
           {}};
    for (auto* x : {&c.q, &c.k, &c.v})
        for (float& f : *x) f = nd(g);
    for (int64_t j = 0; j < n; ++j) {
        c.keys.push_back(c.k.data() + (n - 1 - j) * HS);
        c.values.push_back(c.v.data() + (n - 1 - j) * HS);
    }
    return c;
}

std::vector<float> attend(const Case& c) {
    std::vector<float> out(size_t(c.HS)), scores(size_t(c.n));
    attend_gathered(out.data(), c.q.data(), c.keys.data(), c.values.data(), c.n, c.HS,
                    1.0f / std::sqrt(float(c.HS)), scores.data());
    return out;
}

}  // namespace

TEST(AttendGathered, MatchesReference) {
    for (int64_t n : {1, 5, 16, 77})
        for (int64_t HS : {8, 64, 80}) {
            const Case c = make(n, HS, uint32_t(n * 131 + HS));
            std::vector<double> s(static_cast<size_t>(n));
            double top = -1e300, sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                for (int64_t d = 0; d < HS; ++d)
                    s[size_t(j)] += double(c.q[size_t(d)]) * c.keys[size_t(j)][d];
                s[size_t(j)] /= std::sqrt(double(HS));
                top = std::max(top, s[size_t(j)]);
            }
            for (double& x : s) sum += x = std::exp(x - top);
            const std::vector<float> got = attend(c);
            for (int64_t d = 0; d < HS; ++d) {
                double want = 0;
                for (int64_t j = 0; j < n; ++j) want += s[size_t(j)] * c.values[size_t(j)][d];
                EXPECT_NEAR(got[size_t(d)], want / sum, 1e-4)
                    << "n " << n << " HS " << HS << " d " << d;
            }
        }
}

// The portable path computes the vector path's order lane by lane: the same bits.
TEST(AttendGathered, SameBitsOnEveryPath) {
    for (int64_t n : {1, 15, 16, 33, 200})
        for (int64_t HS : {8, 24, 64, 80, 128}) {
            const Case c = make(n, HS, uint32_t(n * 7 + HS));
            const std::vector<float> want = attend(c);
            for (Isa isa : {Isa::avx512, Isa::portable}) {
                if (!isa_available(isa)) continue;
                set_kernel_isa(isa);
                const std::vector<float> got = attend(c);
                EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                    << "n " << n << " HS " << HS << ", " << isa_name(isa);
            }
            set_kernel_isa(default_isa());
        }
}

// A bf16 KV cache: its keys and values widened exactly, so the bits of the fp32 kernel on the
// widened numbers, on every path.
TEST(AttendGathered, Bf16KeysGiveTheBitsOfTheirWidenedValues) {
    for (int64_t n : {1, 17, 100})
        for (int64_t HS : {24, 64}) {
            Case c = make(n, HS, uint32_t(n * 3 + HS));
            std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
            for (size_t i = 0; i < c.k.size(); ++i) {
                k16[i] = fp32_to_bf16(c.k[i]);
                v16[i] = fp32_to_bf16(c.v[i]);
                c.k[i] = bf16_to_fp32(k16[i]);
                c.v[i] = bf16_to_fp32(v16[i]);
            }
            const std::vector<float> want = attend(c);
            std::vector<const uint16_t*> keys, values;
            for (int64_t j = 0; j < n; ++j) {
                keys.push_back(k16.data() + (n - 1 - j) * HS);
                values.push_back(v16.data() + (n - 1 - j) * HS);
            }
            for (Isa isa : {Isa::avx512, Isa::portable}) {
                if (!isa_available(isa)) continue;
                set_kernel_isa(isa);
                std::vector<float> got(static_cast<size_t>(HS)), scores(static_cast<size_t>(n));
                attend_gathered(got.data(), c.q.data(), keys.data(), values.data(), n, HS,
                                1.0f / std::sqrt(float(HS)), scores.data());
                EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                    << "n " << n << " HS " << HS << ", " << isa_name(isa);
            }
            set_kernel_isa(default_isa());
        }
}

// Grouped-query attention's heads of one kv head in one pass: each head the bits of
// attend_gathered alone on the portable path (the order of the old per-head kernel), on every
// path, for groups that fill one pass of four heads, several, and part of one, fp32 and bf16.
TEST(AttendGathered, GroupGivesEachHeadsBitsAlone) {
    for (int64_t G : {1, 2, 3, 4, 5, 8})
        for (int64_t n : {1, 3, 4, 5, 33, 100})
            for (int64_t HS : {8, 64, 80, 128}) {
                Case c = make(n, HS, uint32_t(G * 1000 + n * 7 + HS));
                std::mt19937 gen(uint32_t(G + n));
                std::normal_distribution<float> nd(0.0f, 2.0f);
                std::vector<float> q(size_t(G * HS));
                for (float& f : q) f = nd(gen);
                std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
                for (size_t i = 0; i < c.k.size(); ++i) {
                    k16[i] = fp32_to_bf16(c.k[i]);
                    v16[i] = fp32_to_bf16(c.v[i]);
                }
                std::vector<const uint16_t*> keys16, values16;
                for (int64_t j = 0; j < n; ++j) {
                    keys16.push_back(k16.data() + (n - 1 - j) * HS);
                    values16.push_back(v16.data() + (n - 1 - j) * HS);
                }
                const float scale = 1.0f / std::sqrt(float(HS));
                std::vector<float> scores(size_t(G * n)), want32(size_t(G * HS)),
                    want16(size_t(G * HS));
                set_kernel_isa(Isa::portable);
                for (int64_t h = 0; h < G; ++h) {
                    attend_gathered(want32.data() + h * HS, q.data() + h * HS, c.keys.data(),
                                    c.values.data(), n, HS, scale, scores.data());
                    attend_gathered(want16.data() + h * HS, q.data() + h * HS, keys16.data(),
                                    values16.data(), n, HS, scale, scores.data());
                }
                for (Isa isa : {Isa::avx512, Isa::portable}) {
                    if (!isa_available(isa)) continue;
                    set_kernel_isa(isa);
                    std::vector<float> got(size_t(G * HS));
                    attend_gathered_group(got.data(), q.data(), G, c.keys.data(), c.values.data(),
                                          n, HS, scale, scores.data());
                    EXPECT_EQ(0, std::memcmp(got.data(), want32.data(), got.size() * sizeof(float)))
                        << "fp32 G " << G << " n " << n << " HS " << HS << ", " << isa_name(isa);
                    attend_gathered_group(got.data(), q.data(), G, keys16.data(), values16.data(),
                                          n, HS, scale, scores.data());
                    EXPECT_EQ(0, std::memcmp(got.data(), want16.data(), got.size() * sizeof(float)))
                        << "bf16 G " << G << " n " << n << " HS " << HS << ", " << isa_name(isa);
                }
                set_kernel_isa(default_isa());
            }
}
