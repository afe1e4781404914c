// Draft-model speculation through real models: greedy output is plain greedy's bit for bit, with
// the model itself as its draft (every guess kept) and with a smaller draft (guesses kept and
// rejected, so the draft's cache is cut back), every family, fp32 and bf16; sampling keeps the
// model's law (a chi-square test of generated tokens over many seeds against the law computed
// from the model's own one-step logits).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "support/chi_square.hpp"
#include "support/draft_weights.hpp"
#include "support/family_cases.hpp"
#include "support/speculation_cases.hpp"
#include "weft/decode/draft.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/model/family.hpp"
#include "weft/model/vocab_shortlist.hpp"

using namespace weft;

namespace {

// A model at test size with its initialised parameters; `scale` makes it peaky, so that greedy
// text repeats and a draft can guess it.
struct TinyModel {
    TinyModel(const model::ModelConfig& c, uint64_t seed, float scale)
        : cfg(c), m(model::make_model(c)), params(m->layout().total) {
        model::init_params(params.data(), m->layout(), seed);
        for (int64_t i = 0; i < params.size(); ++i) params[i] *= scale;
    }
    decode::DraftModel draft(bool bf16) const {
        return decode::DraftModel(cfg, m->layout(), params.data(), bf16);
    }
    model::ModelConfig cfg;
    std::unique_ptr<model::Model> m;
    Buffer params;
};

class DraftGreedy : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(DraftGreedy, IsPlainGreedyBitForBit) {
    const auto [preset, bf16] = GetParam();
    const TinyModel target(test::small_family_config(preset, 61, 48, 2), 11, 8.0f);
    // The draft: the target's first layer alone (with its embeddings and head), so that it
    // guesses some of the target's tokens and misses others.
    TinyModel small(test::small_family_config(preset, 61, 48, 1), 12, 8.0f);
    test::copy_target_tensors(target.m->layout(), target.params.data(), small.m->layout(),
                              small.params.data());
    const std::vector<int32_t> prompt = test::repeating_prompt();
    const model::SampleOptions o = test::greedy_past_window();
    const std::vector<int32_t> plain =
        model::generate(target.cfg, target.m->layout(), target.params.data(), prompt, o, {}, bf16);
    decode::SpecOptions spec;
    spec.kind = "draft";
    spec.draft = "unused";  // the model is given
    spec.ngram.max_tokens = 4;
    for (const TinyModel* d : {&target, static_cast<const TinyModel*>(&small)}) {
        decode::DraftModel draft = d->draft(bf16);
        decode::SpecStats st;
        const std::vector<int32_t> fast =
            decode::generate_speculative(target.cfg, target.m->layout(), target.params.data(),
                                         prompt, o, spec, {}, bf16, &st, &draft);
        const std::string which = d == &target ? "the model itself" : "the smaller draft";
        EXPECT_EQ(fast, plain) << which;
        EXPECT_GT(st.accepted, 0) << which << ": no guess was ever kept";
        if (d == &target) {
            EXPECT_EQ(st.accepted, st.guessed) << "the model rejected its own guesses";
        } else {
            EXPECT_LT(st.accepted, st.guessed) << "no guess was rejected: no cut-back tested";
        }
    }
    // Width 3 at greedy: the smaller draft's second and third ids at each depth are leaves
    // beside its chain, distinct from it and each other; the text is still plain greedy's.
    {
        decode::DraftModel draft = small.draft(bf16);
        draft.set_width(3);
        decode::DraftSeq seq;
        const Philox rng = philox_for(0, "draft");
        uint64_t counter = 0;
        const decode::TokenTree t = draft.propose(seq, prompt, 3, o, rng, counter).tree;
        ASSERT_EQ(t.size(), 9);
        EXPECT_EQ(std::vector<int>(t.parents.begin(), t.parents.begin() + 3),
                  (std::vector<int>{-1, 0, 1}));
        for (int parent = -1; parent < 2; ++parent) {
            std::vector<int32_t> ids;
            for (int i = 0; i < t.size(); ++i)
                if (t.parents[size_t(i)] == parent) ids.push_back(t.tokens[size_t(i)]);
            std::sort(ids.begin(), ids.end());
            EXPECT_EQ(ids.size(), 3u);
            EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "a leaf repeats";
        }
        draft.release(seq);
        spec.draft_width = 3;
        decode::SpecStats st;
        EXPECT_EQ(decode::generate_speculative(target.cfg, target.m->layout(), target.params.data(),
                                               prompt, o, spec, {}, bf16, &st, &draft),
                  plain)
            << "with width 3";
        EXPECT_GT(st.accepted, 0) << "with width 3, no guess was ever kept";
        spec.draft_width = 1;
    }
    // The model as its own draft, proposing from a shortlist without plain text's most frequent
    // token: the verify (whole vocabulary) still gives the text, and the draft's guesses of
    // that token, which it can no longer make, are rejected.
    std::vector<int64_t> counts(size_t(target.cfg.vocab_size), 0);
    for (int32_t t : plain) ++counts[size_t(t)];
    std::vector<int32_t> ids = model::most_frequent(counts, target.cfg.vocab_size);
    ids.erase(ids.begin());
    spec.shortlist = std::make_shared<model::VocabShortlist>(ids, target.cfg.vocab_size);
    decode::DraftModel draft = target.draft(bf16);
    decode::SpecStats st;
    EXPECT_EQ(decode::generate_speculative(target.cfg, target.m->layout(), target.params.data(),
                                           prompt, o, spec, {}, bf16, &st, &draft),
              plain)
        << "with a shortlist";
    EXPECT_GT(st.accepted, 0) << "with a shortlist, no guess was ever kept";
    EXPECT_LT(st.accepted, st.guessed) << "the shortlist changed no guess";
}

INSTANTIATE_TEST_SUITE_P(Families, DraftGreedy,
                         ::testing::Combine(test::family_presets(), ::testing::Bool()),
                         test::family_case_name);

// The model's next-token law after `context` (temperature 1), from a one-token-step forward.
std::vector<double> next_law(const TinyModel& t, const std::vector<int32_t>& context) {
    model::Generator g(t.cfg, t.m->layout(), t.params.data());
    const std::span<const float> l = g.feed(context);
    model::SampleOptions o;
    o.temperature = 1;
    const decode::Distribution d = decode::sampling_distribution(l, o);
    std::vector<double> p(size_t(t.cfg.vocab_size), 0.0);
    for (size_t i = 0; i < d.ids.size(); ++i) p[size_t(d.ids[i])] = d.probs[i];
    return p;
}

// Generating 4 tokens: the first is drawn plainly, then the draft guesses the second and third
// (drawn from its q), which the verify keeps or rejects. The joint law of the second and third
// tokens must be the model's, summed over the first. (Treating the drawn guesses as fixed ones
// would be exact too, only rarer to accept; skipping the residual on a rejection fails here.)
void keeps_the_models_law(bool shortlist) {
    const int64_t V = 4;
    model::ModelConfig c = test::small_family_config("tiny", V, 16, 1);
    c.n_embd = 16;
    const TinyModel target(c, 21, 3.0f), small(c, 22, 3.0f);  // another law for the draft
    const std::vector<int32_t> prompt = {1, 3};
    std::vector<double> joint(size_t(V * V), 0.0);
    const std::vector<double> p1 = next_law(target, prompt);
    for (int32_t x = 0; x < V; ++x) {
        const std::vector<double> p2 = next_law(target, {1, 3, x});
        for (int32_t y = 0; y < V; ++y) {
            const std::vector<double> p3 = next_law(target, {1, 3, x, y});
            for (int32_t z = 0; z < V; ++z) joint[size_t(y * V + z)] += p1[x] * p2[y] * p3[z];
        }
    }
    decode::SpecOptions spec;
    spec.kind = "draft";
    spec.draft = "unused";
    spec.ngram.max_tokens = 2;
    // Without id 2 the draft's q is its law restricted to {0, 1, 3}, renormalised: still a
    // proposal the acceptance rule keeps exact, never guessing 2, which the residual then gives.
    if (shortlist)
        spec.shortlist = std::make_shared<model::VocabShortlist>(std::vector{0, 1, 3}, V);
    decode::DraftModel draft = small.draft(false);
    model::SampleOptions o;
    o.temperature = 1;
    o.tokens = 4;
    const int n = 8000;
    std::map<int, int> counts;
    decode::SpecStats total;
    for (int i = 0; i < n; ++i) {
        o.seed = uint64_t(i);
        decode::SpecStats st;
        const std::vector<int32_t> out = decode::generate_speculative(
            c, target.m->layout(), target.params.data(), prompt, o, spec, {}, false, &st, &draft);
        ASSERT_EQ(out.size(), 4u);
        ++counts[out[1] * V + out[2]];
        total.guessed += st.guessed;
        total.accepted += st.accepted;
    }
    EXPECT_LT(test::chi_square(counts, joint, n), test::chi_square_limit(int(V * V) - 1))
        << "the tokens' law is not the model's";
    // Both verdicts happen often, or the test would not see a wrong rule.
    EXPECT_GT(total.accepted, total.guessed / 5);
    EXPECT_LT(total.accepted, total.guessed * 4 / 5);
}

TEST(DraftSampling, KeepsTheModelsLaw) {
    keeps_the_models_law(false);
}
TEST(DraftSampling, KeepsTheModelsLawFromAShortlist) {
    keeps_the_models_law(true);
}

TEST(Draft, RefusesAnotherVocabulary) {
    model::ModelConfig a = test::small_family_config("tiny", 61, 48, 1), b = a;
    b.vocab_size = 64;
    try {
        decode::check_draft(a, b);
        FAIL() << "a draft of another vocabulary was taken";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("has 64 ids, the model's 61"), std::string::npos)
            << e.what();
    }
}

}  // namespace
