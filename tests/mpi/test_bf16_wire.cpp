// The bf16 collectives of parallel/bf16_wire.hpp on the world (np 1, 2, 4), against a float64
// reference computed here: each rank's values are rounded to bf16 once (to nearest even), summed
// in fp32 (here: in double, then compared within the fp32 rounding of a sum of n terms), and an
// all-reduce rounds the sum once more; every rank gets the same bits; the counters show half the
// bytes of the fp32 collectives. Sizes include one that the ranks do not divide (the all-reduce
// pads its blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/parallel/bf16_wire.hpp"

using namespace weft;

namespace {

// Rank r's element i: values of several magnitudes whose bf16 rounding is not exact.
float value(int rank, int64_t i) {
    return std::ldexp(1.0f + 0.0123457f * float((i * 7 + rank * 13) % 97),
                      int((i + rank) % 9) - 4) *
           ((i + rank) % 3 == 0 ? -1.0f : 1.0f);
}
double rounded(float x) {
    return kernels::bf16_to_fp32(kernels::fp32_to_bf16(x));
}
// The sum over ranks of the bf16-rounded values of element i, in double.
double reference_sum(int n, int64_t i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += rounded(value(r, i));
    return s;
}
// fp32 sums of n bf16 terms: within n fp32 roundings of the double sum of their magnitudes.
double sum_tolerance(int n, int64_t i) {
    double m = 0;
    for (int r = 0; r < n; ++r) m += std::abs(rounded(value(r, i)));
    return n * 0x1p-24 * m;
}

}  // namespace

TEST(Bf16Wire, AllReduceSumsInFp32AndAgreesOnEveryRank) {
    comm::Mesh mesh(Layout{});  // dp = world
    comm::Group& g = mesh.group(comm::Axis::dp);
    const int n = g.size();
    parallel::Bf16Collectives wire;
    for (int64_t count : {int64_t(1), int64_t(4 * n), int64_t(1001)}) {
        std::vector<float> x(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) x[size_t(i)] = value(g.rank(), i);
        wire.all_reduce_sum(g, x.data(), count);
        for (int64_t i = 0; i < count; ++i) {
            const double want = reference_sum(n, i);
            // One more rounding of the sum to bf16 (2^-9 relative), after the fp32 sums.
            const double tol = sum_tolerance(n, i) + (n > 1 ? std::abs(want) * 0x1p-8 : 0);
            ASSERT_NEAR(x[size_t(i)], n == 1 ? double(value(0, i)) : want, tol)
                << "element " << i << " of " << count;
        }
        // The same bits on every rank: rank 0's copy broadcast and compared.
        std::vector<float> zero = x;
        comm::broadcast(g, std::span<float>(zero), 0);
        EXPECT_EQ(std::memcmp(zero.data(), x.data(), x.size() * sizeof(float)), 0);
    }
}

TEST(Bf16Wire, ReduceScatterAndAllGather) {
    comm::Mesh mesh(Layout{});
    comm::Group& g = mesh.group(comm::Axis::dp);
    const int n = g.size(), me = g.rank();
    parallel::Bf16Collectives wire;
    const int64_t block = 37;
    std::vector<float> in(static_cast<size_t>(block * n)), out(static_cast<size_t>(block));
    for (int64_t i = 0; i < block * n; ++i) in[size_t(i)] = value(me, i);
    wire.reduce_scatter_sum(g, in.data(), out.data(), block);
    for (int64_t i = 0; i < block; ++i) {
        const int64_t j = me * block + i;
        ASSERT_NEAR(out[size_t(i)], n == 1 ? double(value(0, j)) : reference_sum(n, j),
                    sum_tolerance(n, j))
            << "element " << i;
    }
    // All-gather, in place from this rank's block: every block is its rank's values in bf16.
    std::vector<float> full(static_cast<size_t>(block * n));
    for (int64_t i = 0; i < block; ++i) full[size_t(me * block + i)] = value(me, i);
    wire.all_gather(g, full.data() + me * block, full.data(), block);
    for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < block; ++i)
            ASSERT_EQ(full[size_t(r * block + i)],
                      n == 1 ? value(r, i) : float(rounded(value(r, i))))
                << "rank " << r << " element " << i;
}

TEST(Bf16Wire, HalfTheBytesOfFp32) {
    comm::Mesh mesh(Layout{});
    comm::Group& g = mesh.group(comm::Axis::dp);
    const int n = g.size();
    if (n == 1) GTEST_SKIP() << "nothing goes on the wire";
    const int64_t count = 64 * n;
    std::vector<float> x(size_t(count), 1.0f);
    auto bus = [&] { return g.stats().total().bus_bytes; };
    mesh.reset_stats();
    comm::all_reduce(g, std::span<float>(x));
    const double fp32 = bus();
    mesh.reset_stats();
    parallel::Bf16Collectives wire;
    wire.all_reduce_sum(g, x.data(), count);
    EXPECT_DOUBLE_EQ(bus(), fp32 / 2);
}
