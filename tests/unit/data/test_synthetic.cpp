// The synthetic corpus: lengths follow the stated distribution (the lognormal's median, the
// Pareto's minimum and tail), are clamped to [2, max], and every document is its end-of-text
// token and a repeated motif of other ids, the same for the same seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "support/check.hpp"
#include "weft/data/synthetic.hpp"

namespace weft::data {
namespace {

TEST(Synthetic, LognormalMedianAndClamp) {
    std::vector<int64_t> n =
        synthetic_lengths(parse_length_distribution("lognormal:300:1.2", 4000), 20000, 3);
    std::sort(n.begin(), n.end());
    EXPECT_NEAR(double(n[n.size() / 2]), 300.0, 15.0);
    EXPECT_GE(n.front(), 2);
    EXPECT_EQ(n.back(), 4000);  // e^(1.2 x 2.2) x 300 passes 4000 for 1.4% of them
}

TEST(Synthetic, ParetoMinimumAndTail) {
    const std::vector<int64_t> n =
        synthetic_lengths(parse_length_distribution("pareto:50:1.5", 1 << 20), 20000, 4);
    EXPECT_EQ(*std::min_element(n.begin(), n.end()), 50);
    // P(X > 10 MIN) = 10^-1.5 = 3.2%.
    const double tail =
        double(std::count_if(n.begin(), n.end(), [](int64_t x) { return x > 500; }));
    EXPECT_NEAR(tail / double(n.size()), 0.0316, 0.004);
}

TEST(Synthetic, DocumentsStartWithEndOfText) {
    const std::vector<int64_t> lengths{5, 2, 9};
    const SyntheticCorpus c = synthetic_corpus(lengths, 100, 1);
    EXPECT_EQ(c.starts, (std::vector<int64_t>{0, 5, 7}));
    ASSERT_EQ(c.tokens.size(), 16u);
    for (size_t i = 0; i < c.tokens.size(); ++i) {
        const bool start = std::count(c.starts.begin(), c.starts.end(), int64_t(i)) > 0;
        EXPECT_EQ(c.tokens[i] == 100, start) << i;
    }
    EXPECT_EQ(synthetic_corpus(lengths, 100, 1).tokens, c.tokens);
    EXPECT_NE(synthetic_corpus(lengths, 100, 2).tokens, c.tokens);
}

TEST(Synthetic, RefusesOtherSpecs) {
    EXPECT_EQ(test::error_of([] { parse_length_distribution("lognormal:300", 100); }),
              "--lengths 'lognormal:300': expected lognormal:MEDIAN:SIGMA or pareto:MIN:ALPHA "
              "with positive numbers (e.g. lognormal:300:1.2)");
    EXPECT_NE(test::error_of([] {
                  parse_length_distribution("pareto:5:1", 1);
              }).find("--max-doc-len must be at least 2"),
              std::string::npos);
}

}  // namespace
}  // namespace weft::data
