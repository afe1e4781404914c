// hand_over: the copy a product's threads read its input from is the input, byte for byte, at
// every length (whole lines streamed, the tail copied), 64-byte aligned, and stays so as the
// buffer grows and is reused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/hand_over.hpp"

namespace weft::kernels {
namespace {

TEST(HandOver, CopiesEveryLengthAligned) {
    std::vector<unsigned char> src(100003);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    // Growing, shrinking and growing again: the buffer is reused or replaced, never short.
    for (int64_t n : {0, 1, 63, 64, 65, 127, 4096, 100003, 200, 77777}) {
        for (int64_t offset : {0, 3}) {  // sources aligned or not
            const int64_t len = std::min<int64_t>(n, int64_t(src.size()) - offset);
            const void* copy = hand_over(src.data() + offset, len);
            ASSERT_NE(copy, nullptr);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy) % 64, 0u) << "n " << len;
            EXPECT_EQ(std::memcmp(copy, src.data() + offset, size_t(len)), 0) << "n " << len;
        }
    }
}

TEST(HandOver, NegativeLengthIsNamed) {
    const char c = 0;
    EXPECT_THROW(hand_over(&c, -1), Error);
}

}  // namespace
}  // namespace weft::kernels
