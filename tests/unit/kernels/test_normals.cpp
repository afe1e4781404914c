// The batched normals are Philox::normal's values: over 1M elements of each of three streams (and
// runs that start anywhere), every float equal to libm's Box-Muller or one float step from it, at
// most a few in a million differing; and the law is the standard normal's (mean, variance,
// tails), so a wrong polynomial or quadrant cannot hide behind the 1-ulp allowance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "weft/kernels/normals.hpp"

using namespace weft;

namespace {

int64_t ulps(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b ? 0 : 1 << 30;
    return std::llabs(int64_t(ia) - int64_t(ib));
}

}  // namespace

TEST(PhiloxNormals, EqualPhiloxNormalToAFloatStep) {
    const int64_t n = int64_t(1) << 20;
    std::vector<float> z(static_cast<size_t>(n));
    for (uint64_t seed : {0ull, 7ull, 1234567ull}) {
        const Philox rng = philox_for(seed, "test normals");
        const uint64_t first = seed << 40;  // MeZO keys a unit's elements at unit << 40
        kernels::philox_normals(rng, first, n, z.data());
        int64_t differ = 0, worst = 0;
        double sum = 0, sq = 0;
        int64_t beyond3 = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float want = rng.normal(first + uint64_t(i));
            const int64_t d = ulps(z[size_t(i)], want);
            differ += d != 0;
            worst = std::max(worst, d);
            sum += z[size_t(i)];
            sq += double(z[size_t(i)]) * z[size_t(i)];
            beyond3 += std::fabs(z[size_t(i)]) > 3;
        }
        EXPECT_LE(worst, 1) << "seed " << seed;
        EXPECT_LE(differ, n / 200000) << "seed " << seed << ": " << differ << " of " << n;
        const double mean = sum / n, var = sq / n - mean * mean;
        EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(double(n)));
        EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
        // P(|z| > 3) = 0.0026998
        EXPECT_NEAR(double(beyond3) / n, 0.0026998, 5.0 * std::sqrt(0.0027 / n));
    }
    // A run may start and end anywhere: the values are the elements', not the run's.
    const Philox rng = philox_for(3, "test normals");
    std::vector<float> a(100), b(37);
    kernels::philox_normals(rng, 1000, 100, a.data());
    kernels::philox_normals(rng, 1031, 37, b.data());
    for (int i = 0; i < 37; ++i) EXPECT_EQ(a[size_t(31 + i)], b[size_t(i)]);
}
