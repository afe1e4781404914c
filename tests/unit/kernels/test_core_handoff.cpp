// core_handoff: the CPUs the process may run on, a handoff time between two of them, and a
// clear error for a CPU outside them, the same CPU twice, or no passes.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/core_handoff.hpp"

namespace weft::kernels {
namespace {

TEST(CoreHandoff, AllowedCpusHoldTheOneRunningThis) {
    const std::vector<int> cpus = allowed_cpus();
    ASSERT_FALSE(cpus.empty());
    EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
    EXPECT_NE(std::find(cpus.begin(), cpus.end(), sched_getcpu()), cpus.end());
}

TEST(CoreHandoff, TwoCpusGiveAPositiveTime) {
    const std::vector<int> cpus = allowed_cpus();
    if (cpus.size() < 2) GTEST_SKIP() << "one CPU";
    const double ns = core_handoff_ns(cpus[0], cpus[1], 100);
    EXPECT_TRUE(std::isfinite(ns));
    EXPECT_GT(ns, 0.0);
}

TEST(CoreHandoff, BadInputIsNamed) {
    const std::vector<int> cpus = allowed_cpus();
    const int outside = cpus.back() + 1;
    EXPECT_THROW(core_handoff_ns(cpus[0], outside, 10), Error);
    EXPECT_THROW(core_handoff_ns(cpus[0], cpus[0], 10), Error);
    EXPECT_THROW(core_handoff_ns(cpus[0], cpus.back(), 0), Error);
}

}  // namespace
}  // namespace weft::kernels
