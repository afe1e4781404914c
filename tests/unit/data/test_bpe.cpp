// The merge loop both BPE front-ends share, on hand-made merge tables where the order of merges
// decides the result.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/data/bpe.hpp"

namespace {

using weft::data::BpeModel;

// Every byte is the token of its own value; merges make ids from 256 up.
BpeModel byte_model() {
    BpeModel m;
    for (int b = 0; b < 256; ++b) m.set_byte_token(static_cast<uint8_t>(b), b);
    return m;
}

std::vector<int32_t> encode(const BpeModel& m, std::string_view s) {
    std::vector<int32_t> out;
    m.encode(s, out);
    return out;
}

TEST(Bpe, LowestRankFirstThenLeftmost) {
    BpeModel m = byte_model();
    ASSERT_TRUE(m.add_merge('a', 'a', 256));  // rank 0
    ASSERT_TRUE(m.add_merge(256, 256, 257));  // rank 1
    ASSERT_TRUE(m.add_merge(256, 'a', 258));  // rank 2
    EXPECT_FALSE(m.add_merge('a', 'a', 300));
    // aa|aa|a, then (aa aa) outranks (aa a).
    EXPECT_EQ(encode(m, "aaaaa"), (std::vector<int32_t>{257, 'a'}));
    EXPECT_EQ(encode(m, "aaa"), (std::vector<int32_t>{258}));
    EXPECT_EQ(encode(m, "b"), (std::vector<int32_t>{'b'}));
    EXPECT_TRUE(encode(m, "").empty());
    // The cache gives the same answer the second time.
    EXPECT_EQ(encode(m, "aaaaa"), (std::vector<int32_t>{257, 'a'}));
}

TEST(Bpe, NewPairsJoinTheQueue) {
    BpeModel m = byte_model();
    ASSERT_TRUE(m.add_merge('b', 'c', 256));  // rank 0
    ASSERT_TRUE(m.add_merge('a', 256, 257));  // rank 1: only exists once bc is made
    ASSERT_TRUE(m.add_merge('a', 'b', 258));  // rank 2: loses to bc
    EXPECT_EQ(encode(m, "abc"), (std::vector<int32_t>{257}));
    EXPECT_EQ(encode(m, "abd"), (std::vector<int32_t>{258, 'd'}));
}

TEST(Bpe, LongPieceMergesCompletely) {
    // A run of spaces is one pre-token; pairs of pairs must keep merging to the end.
    BpeModel m = byte_model();
    ASSERT_TRUE(m.add_merge(' ', ' ', 256));
    ASSERT_TRUE(m.add_merge(256, 256, 257));
    std::vector<int32_t> tokens = encode(m, std::string(100001, ' '));
    ASSERT_EQ(tokens.size(), 25001u);
    EXPECT_EQ(tokens.back(), ' ');
    EXPECT_EQ(tokens[24999], 257);
}

}  // namespace
