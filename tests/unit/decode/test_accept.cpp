// The acceptance rules of speculative decoding: greedy walks give plain greedy's tokens, and
// sampling's verdicts are distributed exactly as the model's own distribution (a chi-square test
// over many draws), for fixed guesses (several under one node) and for a draft's drawn guesses.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "support/chi_square.hpp"
#include "weft/decode/accept.hpp"
#include "weft/decode/ngram.hpp"

namespace weft::decode {
namespace {

using test::chi_square;
using test::chi_square_limit;

std::vector<float> logits_of(const std::vector<double>& p) {
    std::vector<float> l;
    for (double x : p) l.push_back(float(std::log(x)));
    return l;
}

TEST(Distribution, DrawsWhatPickTokenDraws) {
    std::mt19937 g(1);
    std::normal_distribution<float> n(0, 2);
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> l(50);
        for (auto& x : l) x = n(g);
        model::SampleOptions o;
        o.temperature = 0.7f + 0.1f * float(trial % 5);
        o.top_k = trial % 3 == 0 ? 10 : 0;
        o.top_p = trial % 2 == 0 ? 0.9f : 1.0f;
        const Distribution d = sampling_distribution(l, o);
        double sum = 0;
        for (double p : d.probs) sum += p;
        EXPECT_NEAR(sum, 1.0, 1e-12);
        for (int i = 0; i < 500; ++i) {
            const float u = float(i) / 500.0f + 0.0007f;
            EXPECT_EQ(draw(d, u), model::pick_token(l, o, u)) << "trial " << trial << " u " << u;
        }
    }
}

TEST(AcceptGreedy, WalksTheArgmaxPath) {
    // Vocabulary 4; rows' argmax: root 2, node 0 (token 2) 3, node 1 (token 3) 1.
    TokenTree t;
    const int a = t.add(-1, 2), b = t.add(a, 3);
    t.add(-1, 1);
    const std::vector<std::vector<float>> rows = {
        {0, 0, 5, 0}, {0, 0, 0, 5}, {0, 5, 0, 0}, {5, 0, 0, 0}};
    const Verdict v =
        accept_greedy(t, [&](int r) { return std::span<const float>(rows[size_t(r)]); });
    EXPECT_EQ(v.nodes, (std::vector<int>{a, b}));
    EXPECT_EQ(v.next, 1);
}

// Two steps of a vocabulary of 5: the model's distribution at the root, and at each first
// token. The joint law of the first two tokens of the verdict must be p_root(x) p_x(y).
struct TwoSteps {
    std::vector<double> root = {0.4, 0.25, 0.2, 0.1, 0.05};
    std::vector<std::vector<double>> after = {{0.1, 0.2, 0.3, 0.2, 0.2},
                                              {0.5, 0.1, 0.1, 0.2, 0.1},
                                              {0.2, 0.2, 0.2, 0.2, 0.2},
                                              {0.05, 0.05, 0.1, 0.2, 0.6},
                                              {0.3, 0.3, 0.1, 0.1, 0.2}};
    std::vector<double> joint() const {
        std::vector<double> j;
        for (size_t x = 0; x < 5; ++x)
            for (size_t y = 0; y < 5; ++y) j.push_back(root[x] * after[x][y]);
        return j;
    }
};

template <class Run>
void expect_joint_law(const TwoSteps& m, Run run) {
    const int n = 40000;
    std::map<int, int> counts;
    Philox rng = philox_for(7, "test");
    uint64_t counter = 0;
    for (int i = 0; i < n; ++i) {
        const std::pair<int32_t, int32_t> xy = run(rng, counter);
        ++counts[xy.first * 5 + xy.second];
    }
    const double x2 = test::chi_square(counts, m.joint(), n);
    EXPECT_LT(x2, test::chi_square_limit(24)) << "the verdicts' law is not the model's";
}

TEST(AcceptSampling, FixedGuessesKeepTheModelsLaw) {
    const TwoSteps m;
    model::SampleOptions o;
    o.temperature = 1;
    // Guesses: tokens 1 and 3 under the root (1 then 4 under the first), a likely and an
    // unlikely path, so that acceptance, rejection and the residual all happen.
    TokenTree t;
    const int a = t.add(-1, 1);
    t.add(a, 4);
    t.add(-1, 3);
    std::vector<std::vector<float>> rows = {logits_of(m.root), logits_of(m.after[1]),
                                            logits_of(m.after[4]), logits_of(m.after[3])};
    expect_joint_law(m, [&](const Philox& rng, uint64_t& counter) {
        const Verdict v = accept_sampling(
            t, [&](int r) { return std::span<const float>(rows[size_t(r)]); }, o, {}, rng, counter);
        if (v.nodes.empty()) {  // the first token is `next`; draw the second from its row
            const Distribution d = sampling_distribution(logits_of(m.after[size_t(v.next)]), o);
            return std::pair{v.next, draw(d, rng.uniform(counter++))};
        }
        const int32_t x = t.tokens[size_t(v.nodes[0])];
        return std::pair{x, v.nodes.size() > 1 ? t.tokens[size_t(v.nodes[1])] : v.next};
    });
}

TEST(AcceptSampling, DraftGuessesKeepTheModelsLaw) {
    const TwoSteps m;
    model::SampleOptions o;
    o.temperature = 1;
    // A draft whose law differs from the model's: the guess is drawn from it each time.
    const std::vector<double> q_root = {0.1, 0.1, 0.5, 0.2, 0.1};
    const std::vector<double> q_after = {0.2, 0.2, 0.2, 0.2, 0.2};
    const Distribution q0 = sampling_distribution(logits_of(q_root), o);
    const Distribution q1 = sampling_distribution(logits_of(q_after), o);
    expect_joint_law(m, [&](const Philox& rng, uint64_t& counter) {
        const int32_t x = draw(q0, rng.uniform(counter++)), y = draw(q1, rng.uniform(counter++));
        TokenTree t = TokenTree::chain(std::vector<int32_t>{x, y});
        std::vector<std::vector<float>> rows = {logits_of(m.root), logits_of(m.after[size_t(x)]),
                                                logits_of(m.after[0])};  // row 2 unused below
        const Verdict v = accept_sampling(
            t, [&](int r) { return std::span<const float>(rows[size_t(r)]); }, o,
            [&](int node) { return node < 0 ? &q0 : &q1; }, rng, counter);
        if (v.nodes.empty()) {
            const Distribution d = sampling_distribution(logits_of(m.after[size_t(v.next)]), o);
            return std::pair{v.next, draw(d, rng.uniform(counter++))};
        }
        if (v.nodes.size() == 1) return std::pair{x, v.next};
        return std::pair{x, y};
    });
}

TEST(TokenTree, RowsSeeTheirPathFromTheRoot) {
    TokenTree t;
    const int a = t.add(-1, 10), b = t.add(a, 11);
    const int c = t.add(-1, 12);
    t.add(b, 13);
    EXPECT_EQ(t.row_offsets(), (std::vector<int>{0, 1, 2, 1, 3}));
    const auto paths = t.row_paths();
    EXPECT_EQ(paths[0], (std::vector<int>{0}));
    EXPECT_EQ(paths[size_t(b) + 1], (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(paths[size_t(c) + 1], (std::vector<int>{0, 3}));
    EXPECT_EQ(paths[4], (std::vector<int>{0, 1, 2, 4}));
}

TEST(Ngram, GuessesWhatFollowedTheLongestEarlierMatch) {
    NgramOptions o;
    o.max_tokens = 3;
    // "5 6 7" occurred before, followed by 8 9 1; "7" alone also follows 2 earlier.
    const std::vector<int32_t> ctx = {7, 2, 5, 6, 7, 8, 9, 1, 4, 5, 6, 7};
    EXPECT_EQ(propose_ngram(ctx, o).tokens, (std::vector<int32_t>{8, 9, 1}));
    const std::vector<int32_t> none = {1, 2, 3, 4};
    EXPECT_TRUE(propose_ngram(none, o).empty());
    // The latest occurrence wins, and the guess stops at the context's end.
    const std::vector<int32_t> tail = {3, 1, 3, 2, 3};
    EXPECT_EQ(propose_ngram(tail, o).tokens, (std::vector<int32_t>{2, 3}));
}

}  // namespace
}  // namespace weft::decode
