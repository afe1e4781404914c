// Large arrays (the weights a decode step streams whole) start on a huge page and carry the
// kernel's huge-page advice before they are touched; small ones stay ordinary allocations.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/core/huge_pages.hpp"

using namespace weft;

namespace {

// The VmFlags of the mapping that holds p, from /proc/self/smaps ("" when not found).
std::string vm_flags(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream range(line);
        if (range >> std::hex >> lo >> dash >> hi && dash == '-' &&
            line.find(':') > line.find(' ')) {
            inside = lo <= at && at < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) return line;
    }
    return "";
}

bool advised(const void* p) {
    return vm_flags(p).find(" hg") != std::string::npos;
}

TEST(HugePages, LargeBufferIsAlignedAdvisedAndZero) {
    const int64_t n = int64_t(3 * kHugePageBytes / sizeof(float)) + 5;
    Buffer b(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageBytes, 0u);
    EXPECT_TRUE(advised(b.data())) << vm_flags(b.data());
    for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(b[i], 0.0f) << i;
    EXPECT_EQ(b[n - 1], 0.0f);
}

TEST(HugePages, TailPastTheLastWholeHugePageIsNotAdvised) {
    // Advised, the tail would take a whole huge page: resident memory past the estimate's.
    Buffer b(int64_t((kHugePageBytes + 8192) / sizeof(float)));
    EXPECT_TRUE(advised(b.data())) << vm_flags(b.data());
    EXPECT_FALSE(advised(&b[b.size() - 1])) << vm_flags(&b[b.size() - 1]);
}

TEST(HugePages, SmallBufferIsNotAdvised) {
    Buffer b(1024);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    EXPECT_FALSE(advised(b.data())) << vm_flags(b.data());
}

TEST(HugePages, AllocatorTakesHugePagesForLargeVectors) {
    std::vector<uint16_t, HugePageAllocator<uint16_t>> big(kHugePageBytes / 2 + 1, 7);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes, 0u);
    EXPECT_TRUE(advised(big.data())) << vm_flags(big.data());
    EXPECT_EQ(big.back(), 7);
    std::vector<uint16_t, HugePageAllocator<uint16_t>> small(100, 3);
    EXPECT_EQ(small[99], 3);
    big = small;  // frees the huge allocation through the matching path
    EXPECT_EQ(big.size(), 100u);
}

TEST(HugePages, ArenaKeepsSmallArraysTogetherOnAdvisedHugePages) {
    HugePageArena arena;
    auto* a = static_cast<char*>(arena.take(1000 * 1000));  // under a huge page alone
    auto* b = static_cast<char*>(arena.take(100));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kHugePageBytes, 0u);
    EXPECT_TRUE(advised(a)) << vm_flags(a);
    EXPECT_EQ(b, a + 1000 * 1000);  // a multiple of 64: b follows a
    // Larger than a chunk: its own, and the smaller ones after it go back to the first.
    auto* big = static_cast<char*>(arena.take(40 * kHugePageBytes + 1));
    auto* c = static_cast<char*>(arena.take(5000));  // b's 100 bytes take 128
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHugePageBytes, 0u);
    EXPECT_TRUE(advised(big + 40 * kHugePageBytes)) << vm_flags(big + 40 * kHugePageBytes);
    EXPECT_EQ(c, b + 128);
    EXPECT_TRUE(advised(c)) << vm_flags(c);
    EXPECT_EQ(arena.reserved(), 16 * kHugePageBytes + 41 * kHugePageBytes);
    std::memset(a, 1, 1000 * 1000);
    std::memset(big, 2, 40 * kHugePageBytes + 1);
    EXPECT_EQ(a[999999] + big[40 * kHugePageBytes], 3);
}

}  // namespace
