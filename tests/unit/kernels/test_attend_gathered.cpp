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
