// Parallel Prompt Decoding: training moves only the prompt tokens (the base weights are the same
// bits before and after) and lowers their loss; the prompts save and load in any number of
// shards; decoding with them gives plain greedy's tokens bit for bit (fp32, bf16, every family)
// with guesses really kept, and sampling's first two tokens follow the model's own law.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "support/chi_square.hpp"
#include "support/family_cases.hpp"
#include "support/ppd_prompts.hpp"
#include "support/temp_dir.hpp"
#include "weft/core/error.hpp"
#include "weft/decode/ppd.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/vocab_shortlist.hpp"
#include "weft/train/ppd_train.hpp"

using namespace weft;

namespace {

struct Trained {
    model::ModelConfig cfg;
    Buffer params;
    decode::PpdPrompts prompts;
    double first_loss = 0, last_loss = 0;
    bool base_unchanged = false;
};

// A peaky model of `preset`, and K = 3 prompts trained on its own greedy text.
Trained train_prompts(const std::string& preset) {
    Trained r;
    r.cfg = test::small_family_config(preset, 61, 48, 2);
    std::unique_ptr<model::Model> m = model::make_model(r.cfg);
    r.params = Buffer(m->layout().total);
    model::init_params(r.params.data(), m->layout(), 21);
    for (int64_t i = 0; i < r.params.size(); ++i) r.params[i] *= 6.0f;
    const std::vector<float> before(r.params.data(), r.params.data() + r.params.size());
    test::PpdTraining t = test::train_ppd_prompts(r.cfg, m->layout(), r.params.data());
    r.first_loss = t.first_loss;
    r.last_loss = t.last_loss;
    r.base_unchanged =
        std::memcmp(before.data(), r.params.data(), before.size() * sizeof(float)) == 0;
    r.prompts = std::move(t.prompts);
    return r;
}

const Trained& trained(const std::string& preset) {
    static std::map<std::string, Trained> cache;
    auto it = cache.find(preset);
    if (it == cache.end()) it = cache.emplace(preset, train_prompts(preset)).first;
    return it->second;
}

class Ppd : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(Ppd, TrainsOnlyThePromptsAndDecodesAsPlainGreedy) {
    const auto [preset, bf16] = GetParam();
    const Trained& t = trained(preset);
    EXPECT_TRUE(t.base_unchanged) << "training changed the base weights";
    EXPECT_LT(t.last_loss, 0.8 * t.first_loss) << "the prompts did not learn";
    std::unique_ptr<model::Model> m = model::make_model(t.cfg);
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = 70;                                // past the window of 48: the rebuild happens too
    const std::vector<int32_t> prompt = {4, 15};  // a start of the text they were trained on
    const std::vector<int32_t> plain =
        model::generate(t.cfg, m->layout(), t.params.data(), prompt, o, {}, bf16);
    decode::SpecStats st;
    const std::vector<int32_t> fast = decode::generate_ppd(
        t.cfg, m->layout(), t.params.data(), prompt, o, t.prompts, bf16 ? 2 : 8, {}, bf16, &st);
    EXPECT_EQ(fast, plain);
    EXPECT_GT(st.accepted, 0) << "no guess was ever kept";
    EXPECT_LT(st.forwards, int64_t(plain.size()));
    // Prompt rows over a shortlist of the ids plain text never takes: the verify rows keep the
    // whole vocabulary, so the text stays plain greedy's, and no guess can stand.
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < t.cfg.vocab_size; ++id)
        if (std::find(plain.begin(), plain.end(), id) == plain.end()) ids.push_back(id);
    const model::VocabShortlist shortlist(ids, t.cfg.vocab_size);
    decode::SpecStats sl;
    EXPECT_EQ(decode::generate_ppd(t.cfg, m->layout(), t.params.data(), prompt, o, t.prompts,
                                   bf16 ? 2 : 8, {}, bf16, &sl, &shortlist),
              plain)
        << "with a shortlist";
    EXPECT_EQ(sl.accepted, 0) << "a guess from outside the shortlist was made";
    // A sparse tree of 6 nodes (default rates: several candidates at depth 1), greedy walks down
    // branches other than the argmaxes' chain: still plain greedy's text, guesses kept.
    EXPECT_GT(decode::PpdProposer(t.prompts, 3, t.cfg.vocab_size, nullptr, 6).shape().width(), 1);
    decode::SpecStats tr;
    EXPECT_EQ(decode::generate_ppd(t.cfg, m->layout(), t.params.data(), prompt, o, t.prompts, 3, {},
                                   bf16, &tr, nullptr, 6),
              plain)
        << "with a tree";
    EXPECT_GT(tr.accepted, 0) << "no guess of the tree was kept";
    EXPECT_LT(tr.forwards, int64_t(plain.size()));
}

INSTANTIATE_TEST_SUITE_P(Families, Ppd,
                         ::testing::Combine(test::family_presets(), ::testing::Bool()),
                         test::family_case_name);

// A prompt's target is the base model's own greedy continuation of the context, what a verify
// compares its guess with, not the window's next tokens: on windows of random tokens (which the
// model would not have written), prompt j's target is token j + 1 that plain greedy generates
// after the window's first t + 1 tokens.
TEST(PpdTraining, TargetsAreTheModelsOwnContinuation) {
    const Trained& base = trained("tiny");
    const model::ModelConfig& cfg = base.cfg;
    const Buffer& params = base.params;
    std::unique_ptr<model::Model> m = model::make_model(cfg);
    const int64_t B = 3, T = 24, K = 3, t = 9;
    std::vector<int32_t> tokens(size_t(B * T));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % 61);
    train::PpdTrainer trainer(cfg, params.data(), K, 5, "argmax");
    const std::vector<int32_t> targets = trainer.targets(tokens.data(), B, T, t);
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = K + 1;
    for (int64_t s = 0; s < B; ++s) {
        const std::vector<int32_t> greedy =
            model::generate(cfg, m->layout(), params.data(),
                            std::span<const int32_t>(tokens.data() + s * T, size_t(t + 1)), o);
        ASSERT_EQ(greedy.size(), size_t(K + 1));
        for (int64_t j = 0; j < K; ++j)
            EXPECT_EQ(targets[size_t(s * K + j)], greedy[size_t(j + 1)])
                << "window " << s << ", prompt " << j + 1;
    }
}

// The joint law of the first two tokens sampled with PPD guesses (temperature 1, top-k 4), a
// chain or a tree of them, is the model's: p(x) p(y | x), computed from its logits.
TEST(PpdSampling, FirstTwoTokensFollowTheModelsLaw) {
    const Trained& t = trained("tiny");
    std::unique_ptr<model::Model> m = model::make_model(t.cfg);
    model::SampleOptions o;
    o.temperature = 1;
    o.top_k = 4;
    o.tokens = 3;  // the second token is a verify's: its guess, kept or not
    const std::vector<int32_t> prompt = {4, 9, 4, 9, 17};
    auto law = [&](std::vector<int32_t> ctx) {
        model::Generator g(t.cfg, m->layout(), t.params.data());
        const model::SamplingWeights w = model::sampling_weights(g.feed(ctx), o);
        std::map<int32_t, double> p;
        for (size_t i = 0; i < w.ids.size(); ++i) p[w.ids[i]] = w.weights[i] / w.sum;
        return p;
    };
    std::map<int, int> cell_of;  // x * V + y -> cell
    std::vector<double> p;
    for (const auto& [x, px] : law(prompt)) {
        std::vector<int32_t> ctx = prompt;
        ctx.push_back(x);
        for (const auto& [y, py] : law(ctx)) {
            cell_of[int(x * t.cfg.vocab_size + y)] = int(p.size());
            p.push_back(px * py);
        }
    }
    const int n = 2000;
    // A chain of guesses, and a sparse tree of 5 (several candidates under a node: each tried
    // against what the ones before left of p).
    for (int tree : {0, 5}) {
        std::map<int, int> counts;
        decode::SpecStats st;
        for (int s = 0; s < n; ++s) {
            o.seed = uint64_t(s);
            const std::vector<int32_t> out =
                decode::generate_ppd(t.cfg, m->layout(), t.params.data(), prompt, o, t.prompts, 8,
                                     {}, false, &st, nullptr, tree);
            ASSERT_GE(out.size(), 2u);
            ++counts[cell_of.at(int(out[0] * t.cfg.vocab_size + out[1]))];
        }
        EXPECT_GT(st.accepted, 10) << "the guesses were hardly ever kept, tree " << tree;
        EXPECT_LT(test::chi_square(counts, p, n), test::chi_square_limit(int(p.size()) - 1))
            << "tree " << tree;
    }
}

// Acceptance measured on the model's own text counts what the decoding itself kept at depth 1;
// the rates are saved beside the prompts and load back with them; a rate out of [0, 1] is
// refused naming the file.
TEST(PpdAcceptance, MeasuresSavesAndLoadsBesideThePrompts) {
    const Trained& t = trained("tiny");
    std::unique_ptr<model::Model> m = model::make_model(t.cfg);
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = 60;
    const std::vector<int32_t> text =
        model::generate(t.cfg, m->layout(), t.params.data(), std::vector<int32_t>{2, 11}, o);
    decode::PpdMeasure how;
    how.prompts = 1;
    how.prompt_tokens = 8;
    how.tokens = 30;
    how.width = 3;
    const decode::PpdCounts counts =
        decode::measure_ppd(t.cfg, m->layout(), t.params.data(), t.prompts, text, how);
    const decode::Acceptance rates = counts.rates();
    ASSERT_EQ(rates.size(), 3u);
    for (size_t d = 0; d < rates.size(); ++d) {
        ASSERT_EQ(rates[d].size(), 3u);
        EXPECT_GT(counts.seen[d], 10) << "depth " << d + 1;
        double sum = 0;
        for (double r : rates[d]) sum += r;
        EXPECT_LE(sum, 1.0) << "depth " << d + 1;
    }
    // The same decoding verified each chain's first guess: it kept exactly the rank-0 hits of
    // depth 1 (but for the last chain, whose guess the tokens wanted left no room for).
    decode::SpecStats st;
    o.tokens = how.tokens;
    decode::generate_ppd(t.cfg, m->layout(), t.params.data(),
                         std::span<const int32_t>(text).first(8), o, t.prompts, 3, {}, false, &st);
    EXPECT_GT(st.accepted_at[0], 0);
    EXPECT_LE(std::abs(counts.hits[0][0] - st.accepted_at[0]), 1)
        << counts.hits[0][0] << " rank-0 hits, " << st.accepted_at[0] << " kept";
    EXPECT_LE(std::abs(counts.seen[0] - st.guessed_at[0]), 1)
        << counts.seen[0] << " counted, " << st.guessed_at[0] << " verified";

    test::TempDir dir("ppd-acc");
    decode::save_ppd(dir.path, 1, t.prompts, {});
    EXPECT_TRUE(decode::load_ppd(dir.path).acceptance.empty());
    const std::filesystem::path file =
        decode::save_ppd_acceptance(dir.path, rates, {{"note", "test"}});
    EXPECT_EQ(decode::load_ppd(dir.path).acceptance, rates);
    std::ofstream(file) << R"({"acceptance": [[0.5], [1.5], [0.1]]})";
    try {
        decode::load_ppd(dir.path);
        ADD_FAILURE() << "a rate of 1.5 was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("1.5"), std::string::npos) << e.what();
    }
}

TEST(PpdFile, SavesAndLoadsInAnyShardsAndRefusesDamage) {
    const Trained& t = trained("tiny");
    test::TempDir dir("ppd");
    decode::save_ppd(dir.path / "one", 7, t.prompts, {{"note", "one shard"}});
    decode::save_ppd(dir.path / "three", 7, t.prompts, {}, 3);
    for (const char* run : {"one", "three"}) {
        const decode::PpdPrompts back = decode::load_ppd(dir.path / run);
        EXPECT_EQ(back.tokens, t.prompts.tokens);
        EXPECT_EQ(back.base, t.cfg);
        EXPECT_EQ(back.embeddings, t.prompts.embeddings) << run;
    }
    // A checkpoint directory itself, not only its run.
    EXPECT_EQ(decode::load_ppd(dir.path / "three/checkpoints/step_000007").embeddings,
              t.prompts.embeddings);
    {
        std::fstream f(dir.path / "three/checkpoints/step_000007/rank_00001.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(5);
        f.put('\x7f');
    }
    EXPECT_THROW(decode::load_ppd(dir.path / "three"), Error);
    model::ModelConfig other = t.cfg;
    other.n_layer = 3;
    try {
        decode::check_ppd_base(t.prompts, other, "p");
        ADD_FAILURE() << "prompts of another model were taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("n_layer"), std::string::npos) << e.what();
    }
}

}  // namespace
