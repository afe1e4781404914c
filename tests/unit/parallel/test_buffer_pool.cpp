// BufferPool hands a kept buffer back for a request of its size or up to a quarter smaller, and a
// new one otherwise; take_zeroed zeroes what it hands back.
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

}  // namespace
}  // namespace weft::parallel
