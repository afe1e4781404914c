// The sparse tree of guesses: choose_tree keeps the paths of ranks whose product of acceptance
// rates is highest, best first, never deeper than asked and never one with no chance; fill puts
// each depth's ranked candidates at their nodes and leaves out what is missing.
#include <gtest/gtest.h>

#include <vector>

#include "weft/decode/tree_shape.hpp"

using namespace weft;

namespace {

const decode::Acceptance kRates = {{0.6, 0.2, 0.1}, {0.5, 0.3}, {0.4}};

TEST(TreeShape, KeepsThePathsMostLikelyKept) {
    // Products: (0) .6, (0 0) .3, (1) .2, (0 1) .18, (0 0 0) .12, then (1 0) .1 and (2) .1.
    const decode::TreeShape s = decode::choose_tree(kRates, 5, 3);
    EXPECT_EQ(s.parents, (std::vector<int>{-1, 0, -1, 0, 1}));
    EXPECT_EQ(s.ranks, (std::vector<int>{0, 0, 1, 1, 0}));
    EXPECT_EQ(s.max_depth(), 3);
    EXPECT_EQ(s.width(), 2);
    // Every prefix is the best tree of its size.
    const decode::TreeShape three = decode::choose_tree(kRates, 3, 3);
    EXPECT_EQ(three.parents, (std::vector<int>{-1, 0, -1}));
    EXPECT_EQ(three.ranks, (std::vector<int>{0, 0, 1}));
    // At most one deep: the three candidates of depth 1, however many nodes are allowed.
    const decode::TreeShape flat = decode::choose_tree(kRates, 8, 1);
    EXPECT_EQ(flat.parents, (std::vector<int>{-1, -1, -1}));
    EXPECT_EQ(flat.ranks, (std::vector<int>{0, 1, 2}));
    // A best rank far ahead of the others makes a chain; a rate of 0 is never guessed.
    const decode::TreeShape chain =
        decode::choose_tree({{0.9, 0.01}, {0.9, 0.0}, {0.9, 0.0}}, 3, 3);
    EXPECT_EQ(chain.parents, (std::vector<int>{-1, 0, 1}));
    EXPECT_EQ(chain.ranks, (std::vector<int>{0, 0, 0}));
    EXPECT_EQ(decode::choose_tree({{0.0, 0.0}}, 4, 3).size(), 0);
    // The default rates make a tree of more than one candidate at some depth.
    EXPECT_GT(decode::choose_tree(decode::default_acceptance(3, 4), 6, 3).width(), 1);
}

TEST(TreeShape, FillsTheRankedCandidates) {
    const decode::TreeShape s = decode::choose_tree(kRates, 5, 3);
    const decode::TokenTree t = s.fill({{10, 11, 12}, {20, 21}, {30}});
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{10, 20, 11, 21, 30}));
    EXPECT_EQ(t.parents, (std::vector<int>{-1, 0, -1, 0, 1}));
    // Depth 1 has one candidate and depth 3 none: rank 1 at depth 1 and the third level go.
    const decode::TokenTree cut = s.fill({{10}, {20, 21}});
    EXPECT_EQ(cut.tokens, (std::vector<int32_t>{10, 20, 21}));
    EXPECT_EQ(cut.parents, (std::vector<int>{-1, 0, 0}));
    EXPECT_TRUE(s.fill({}).empty());
    // A tree cut to the room left keeps the nodes that shallow.
    const decode::TokenTree one = t.within(1);
    EXPECT_EQ(one.tokens, (std::vector<int32_t>{10, 11}));
    EXPECT_EQ(one.parents, (std::vector<int>{-1, -1}));
    EXPECT_EQ(t.within(2).tokens, (std::vector<int32_t>{10, 20, 11, 21}));
    EXPECT_EQ(decode::TreeShape::chain(3).fill({{1, 2}, {3}, {4}}).tokens,
              (std::vector<int32_t>{1, 3, 4}));
}

}  // namespace
