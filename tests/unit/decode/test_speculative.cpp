// Speculative generation with prompt-lookup guesses: greedy output bit for bit plain greedy's
// (the verify forward's rows give one-token steps' logits), for every family, fp32 and bf16,
// across the sliding window's rebuild; guesses are really accepted (the test would not notice a
// verify that never keeps one otherwise).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "support/family_cases.hpp"
#include "support/speculation_cases.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/model/family.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/row_batch.hpp"

using namespace weft;

namespace {

class Speculative : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(Speculative, GreedyIsPlainGreedyBitForBit) {
    const auto [preset, bf16] = GetParam();
    const model::ModelConfig c = test::small_family_config(preset, 61, 48, 2);
    std::unique_ptr<model::Model> m = model::make_model(c);
    Buffer params(m->layout().total);
    model::init_params(params.data(), m->layout(), 11);
    for (int64_t i = 0; i < params.size(); ++i) params[i] *= 8.0f;  // a peaky, repetitive model
    const std::vector<int32_t> prompt = test::repeating_prompt();
    const model::SampleOptions o = test::greedy_past_window();
    const std::vector<int32_t> plain =
        model::generate(c, m->layout(), params.data(), prompt, o, {}, bf16);
    decode::SpecOptions spec;
    spec.kind = "ngram";
    spec.ngram.max_tokens = 6;
    decode::SpecStats st;
    const std::vector<int32_t> fast =
        decode::generate_speculative(c, m->layout(), params.data(), prompt, o, spec, {}, bf16, &st);
    EXPECT_EQ(fast, plain);
    EXPECT_GT(st.accepted, 0) << "no guess was ever kept";
    EXPECT_LT(st.forwards, int64_t(plain.size()) + 2);  // fewer forwards than tokens + prefills
}

INSTANTIATE_TEST_SUITE_P(Families, Speculative,
                         ::testing::Combine(test::family_presets(), ::testing::Bool()),
                         test::family_case_name);

}  // namespace

namespace {

// The verify forward itself: every row of a branching tree has, bit for bit, the logits of the
// same token decoded one step at a time along its path.
TEST(TreeVerify, EveryRowHasItsPathsOneStepLogits) {
    const model::ModelConfig c = test::small_family_config("llama-tiny", 61, 48, 2);
    std::unique_ptr<model::Model> m = model::make_model(c);
    Buffer params(m->layout().total);
    model::init_params(params.data(), m->layout(), 12);
    for (int64_t i = 0; i < params.size(); ++i) params[i] *= 4.0f;
    const std::vector<int32_t> context = {5, 9, 2, 7, 7, 1};
    // Root (the context's last token) then: a(3) -> b(4) -> c(8), and a sibling d(6) of a with
    // a child e(3).
    const std::vector<int32_t> rows = {1, 3, 4, 8, 6, 3};
    const std::vector<int32_t> parents = {-1, 0, 1, 2, 0, 4};
    model::RowForward f(c, m->layout(), params.data());
    model::KvPool kv(8, c.n_layer, f.kv_width(), c.head_dim());
    model::BlockTable table;
    const int64_t pos = int64_t(context.size()) - 1;
    kv.grow(table, pos + int64_t(rows.size()));
    model::RowBatch b;
    b.add(std::span<const int32_t>(context.data(), size_t(pos)), 0, table, false);
    f.run(b, kv);
    b.clear();
    b.add_tree(rows, parents, pos, table);
    const std::vector<float> tree(f.run(b, kv).begin(), f.run(b, kv).end());
    for (size_t r = 0; r < rows.size(); ++r) {
        // The path's tokens, root first, after the context before the root.
        std::vector<int32_t> seq(context.begin(), context.end() - 1), path;
        for (int i = int(r); i >= 0; i = parents[size_t(i)])
            path.insert(path.begin(), rows[size_t(i)]);
        seq.insert(seq.end(), path.begin(), path.end());
        model::Generator g(c, m->layout(), params.data());
        std::span<const float> one;
        for (int32_t t : seq) one = g.feed(std::span<const int32_t>(&t, 1));
        EXPECT_EQ(0, std::memcmp(one.data(), tree.data() + r * size_t(c.vocab_size),
                                 size_t(c.vocab_size) * sizeof(float)))
            << "row " << r;
    }
}

}  // namespace

namespace {

// --spec-tokens 0 (its default) is each proposer's own number of guesses; a number given wins.
TEST(SpecOptions, GuessesDefaultByProposer) {
    decode::SpecOptions spec;
    spec.kind = "ngram";
    EXPECT_EQ(spec.guesses(), 5);
    spec.kind = "draft";
    EXPECT_EQ(spec.guesses(), 1);
    spec.vocab_from = "train.bin";  // its forwards over a shortlist cost little: more guesses
    EXPECT_EQ(spec.guesses(), 3);
    spec.kind = "ppd";
    spec.vocab_from.clear();
    EXPECT_EQ(spec.guesses(), 1);
    spec.tree = 4;  // a sparse tree as deep as the prompts go
    EXPECT_EQ(spec.guesses(), 64);
    spec.ngram.max_tokens = 2;
    EXPECT_EQ(spec.guesses(), 2);
}

}  // namespace
