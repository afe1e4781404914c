// The kernel profiler: off by default, times only the enabling thread's outermost calls (nested
// ones separately), skips calls inside OpenMP parallel regions, and clears between runs.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <thread>
#include <vector>

#include "weft/kernels/gelu.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {
namespace {

void sleep_ms(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void outer_kernel() {
    WEFT_PROFILE("test_outer");
    sleep_ms(20);
    {
        WEFT_PROFILE("test_inner");
        sleep_ms(10);
    }
}

void same_name_wrapper() {
    WEFT_PROFILE("test_outer");  // a wrapper sharing its callee's name counts once
    outer_kernel();
}

const ProfileEntry* find(const std::vector<ProfileEntry>& v, const std::string& name) {
    for (const ProfileEntry& e : v)
        if (e.name == name) return &e;
    return nullptr;
}

TEST(Profile, OffByDefaultRecordsNothing) {
    outer_kernel();
    profile_start();
    auto v = profile_stop();
    EXPECT_EQ(find(v, "test_outer"), nullptr) << "a call before profile_start was recorded";
}

TEST(Profile, OutermostAndNestedTimes) {
    profile_start();
    outer_kernel();
    outer_kernel();
    same_name_wrapper();
    auto v = profile_stop();
    const ProfileEntry* outer = find(v, "test_outer");
    const ProfileEntry* inner = find(v, "test_inner");
    ASSERT_NE(outer, nullptr);
    ASSERT_NE(inner, nullptr);
    EXPECT_EQ(outer->calls, 3);  // the wrapper's callee is not counted again
    EXPECT_GE(outer->seconds, 0.089);
    EXPECT_LT(outer->seconds, 0.5);
    EXPECT_EQ(outer->nested_seconds, 0.0);
    EXPECT_EQ(inner->calls, 3);
    EXPECT_EQ(inner->seconds, 0.0) << "a nested call counted as outermost";
    EXPECT_GE(inner->nested_seconds, 0.029);

    // Cleared by the next start; after stop nothing is recorded.
    outer_kernel();
    profile_start();
    auto empty = profile_stop();
    EXPECT_EQ(find(empty, "test_outer"), nullptr);
}

TEST(Profile, OnlyTheEnablingThreadOutsideParallelRegions) {
    profile_start();
    std::thread([] { outer_kernel(); }).join();
#pragma omp parallel num_threads(2)
    outer_kernel();
    std::vector<float> x(1 << 16, 0.5f), y(x.size());
    gelu_forward(y.data(), x.data(), int64_t(x.size()));  // a real kernel's hook
    auto v = profile_stop();
    EXPECT_EQ(find(v, "test_outer"), nullptr) << "another thread's or a team's call was recorded";
    const ProfileEntry* gelu = find(v, "gelu_fwd");
    ASSERT_NE(gelu, nullptr);
    EXPECT_EQ(gelu->calls, 1);
    EXPECT_GT(gelu->seconds, 0.0);
}

TEST(Profile, Bf16ConversionIsNestedInTheProduct) {
    MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    const int64_t M = 64, K = 64, N = 64;
    std::vector<float> a(size_t(M * K), 0.25f), w(size_t(N * K), 0.5f), out(size_t(M * N));
    profile_start();
    matmul_forward(out.data(), a.data(), w.data(), nullptr, M, K, N);
    auto v = profile_stop();
    const ProfileEntry* fwd = find(v, "matmul_fwd");
    const ProfileEntry* conv = find(v, "bf16_convert");
    ASSERT_NE(fwd, nullptr);
    ASSERT_NE(conv, nullptr);
    EXPECT_EQ(conv->calls, 2);  // input and weight
    EXPECT_EQ(conv->seconds, 0.0);
    EXPECT_GT(conv->nested_seconds, 0.0);
    EXPECT_LE(conv->nested_seconds, fwd->seconds);
}

}  // namespace
}  // namespace weft::kernels
