// BufferPool hands a kept buffer back for a request of its size or up to a quarter smaller, and a
// new one otherwise; take_zeroed zeroes what it hands back; bf16 buffers are kept apart.
#include <gtest/gtest.h>

#include "weft/parallel/buffer_pool.hpp"

namespace weft::parallel {
namespace {

TEST(BufferPool, ReusesWithinAQuarter) {
    BufferPool pool;
    Buffer a = pool.take(1000);
    EXPECT_EQ(a.size(), 1000);
    float* kept = a.data();
    pool.give(std::move(a));
    EXPECT_EQ(pool.kept_bytes(), 4000);
    // 800 floats may take the 1000-float buffer (1000 <= 800 + 200); 700 may not.
    Buffer small = pool.take(700);
    EXPECT_NE(small.data(), kept);
    EXPECT_EQ(small.size(), 700);
    Buffer b = pool.take(800);
    EXPECT_EQ(b.data(), kept);
    EXPECT_EQ(b.size(), 1000);
    EXPECT_EQ(pool.kept_bytes(), 0);
    // A larger request than anything kept is a new buffer.
    pool.give(std::move(b));
    Buffer big = pool.take(1001);
    EXPECT_NE(big.data(), kept);
    EXPECT_EQ(pool.kept_bytes(), 4000);
}

TEST(BufferPool, TakeZeroedZeroesAReusedBuffer) {
    BufferPool pool;
    Buffer a = pool.take(64);
    for (int64_t i = 0; i < 64; ++i) a[i] = 1.0f + float(i);
    pool.give(std::move(a));
    Buffer z = pool.take_zeroed(60);
    for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(z[i], 0.0f) << i;
    pool.give(Buffer());  // an empty buffer is not kept
    EXPECT_EQ(pool.kept_bytes(), 0);
}

// bf16 buffers are pooled apart from the float ones, by the same rule, and counted in bytes.
TEST(BufferPool, KeepsBf16BuffersApartByTheSameRule) {
    BufferPool pool;
    Bf16Buffer a = pool.take_bf16(1000);
    EXPECT_EQ(a.size(), 1000u);
    const uint16_t* kept = a.data();
    pool.give(std::move(a));
    EXPECT_EQ(pool.kept_bytes(), 2000);
    Buffer f = pool.take(800);  // a float request does not take the bf16 buffer
    EXPECT_EQ(pool.kept_bytes(), 2000);
    EXPECT_NE(pool.take_bf16(700).data(), kept);  // more than a quarter smaller: a new one
    Bf16Buffer b = pool.take_bf16(800);
    EXPECT_EQ(b.data(), kept);
    EXPECT_EQ(b.size(), 1000u);
    EXPECT_EQ(pool.kept_bytes(), 0);
    pool.give(std::move(f));
    pool.give(std::move(b));
    EXPECT_EQ(pool.kept_bytes(), 800 * 4 + 2000);
    pool.give(Bf16Buffer());  // an empty buffer is not kept
    EXPECT_EQ(pool.kept_bytes(), 800 * 4 + 2000);
}

}  // namespace
}  // namespace weft::parallel
