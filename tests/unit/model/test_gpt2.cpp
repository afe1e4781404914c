// Whole-model checks: the backward pass against finite differences, the loss at initialisation,
// that vocabulary padding and gradient accumulation change nothing, and that KV-cached
// generation sees the same logits as a full forward pass, keeps to the vocabulary and stops at the
// stop token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "support/check.hpp"
#include "support/model_run.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/gpt2.hpp"

using namespace weft;
using namespace weft::model;

namespace {

using ModelRun = test::ModelRun<Gpt2>;
using test::fill_tokens;

ModelConfig small_config() {
    ModelConfig c;
    c.vocab_size = 97;  // small, so finite differences see a loss that moves
    c.n_positions = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.vocab_multiple = 128;
    return c;
}

}  // namespace

TEST(Gpt2, GradientMatchesFiniteDifferences) {
    ModelConfig c = small_config();
    ModelRun run(c);
    // Larger weights than GPT-2's 0.02 make every path of the gradient visible above rounding.
    for (int64_t i = 0; i < run.params.size(); ++i) run.params[i] *= 5.0f;
    Gpt2Activations a(c, 2, 8);
    fill_tokens(a, c.vocab_size, 3);
    // A few elements of every tensor (embedding rows of tokens that occur, all others spread).
    test::expect_finite_difference_gradients(run, a, 3, 1e-2f, [&](const ParamSpec& t, int k) {
        if (t.name == "wte.weight") return int64_t(a.inputs[size_t(k)]) * c.n_embd + k;
        if (t.name == "wpe.weight") return int64_t(k) * c.n_embd + k;  // positions that are used
        return (k * 7919 + 13) % t.numel_logical();
    });
}

TEST(Gpt2, InitialLossIsLogVocab) {
    ModelConfig c = model_preset("tiny");
    ModelRun run(c, 1337);
    Gpt2Activations a(c, 2, 64);
    fill_tokens(a, c.vocab_size, 11);
    double loss = run.step(a, false);
    EXPECT_NEAR(loss, std::log(double(c.vocab_size)), 0.05);
}

TEST(Gpt2, VocabularyPaddingChangesNothing) {
    ModelConfig padded = small_config(), plain = small_config();
    plain.vocab_multiple = 1;
    ASSERT_EQ(padded.padded_vocab(), 128);
    ASSERT_EQ(plain.padded_vocab(), 97);
    ModelRun a(padded), b(plain);
    Gpt2Activations xa(padded, 2, 8), xb(plain, 2, 8);
    fill_tokens(xa, padded.vocab_size, 4);
    fill_tokens(xb, plain.vocab_size, 4);
    EXPECT_EQ(a.step(xa, true), b.step(xb, true));
    for (const ParamSpec& t : a.model.layout().tensors) {
        const ParamSpec& u = b.model.layout().find(t.name);
        const int64_t n = t.numel_logical();
        EXPECT_EQ(
            0, test::max_abs_diff(a.grads.data() + t.offset, b.grads.data() + u.offset, size_t(n)))
            << t.name;
    }
    // Padding rows of the embedding get no gradient.
    const ParamSpec& wte = a.model.layout().find("wte.weight");
    for (int64_t i = 97 * padded.n_embd; i < 128 * padded.n_embd; ++i)
        ASSERT_EQ(a.grads[wte.offset + i], 0.0f);
}

TEST(Gpt2, GradientAccumulationMatchesOneBigMicroBatch) {
    ModelConfig c = small_config();
    ModelRun whole(c), parts(c);
    Gpt2Activations big(c, 4, 8);
    fill_tokens(big, c.vocab_size, 9);
    FlatAccess w(whole.model.layout(), whole.params.data(), whole.grads.data());
    const float scale = 1.0f / 32.0f;
    double loss_whole = whole.model.forward(big, w, true, scale) * scale;
    whole.model.backward(big, w);

    Gpt2Activations one(c, 1, 8);
    FlatAccess w2(parts.model.layout(), parts.params.data(), parts.grads.data());
    double loss_parts = 0;
    for (int r = 0; r < 4; ++r) {
        std::copy_n(big.inputs.begin() + r * 8, 8, one.inputs.begin());
        std::copy_n(big.targets.begin() + r * 8, 8, one.targets.begin());
        loss_parts += parts.model.forward(one, w2, true, scale) * scale;
        parts.model.backward(one, w2);
    }
    EXPECT_NEAR(loss_whole, loss_parts, 1e-6);
    EXPECT_LT(
        test::max_abs_diff(parts.grads.data(), whole.grads.data(), size_t(whole.grads.size())),
        1e-6);
}

TEST(Gpt2, KvCachedGenerationMatchesFullForward) {
    ModelConfig c = small_config();
    ModelRun run(c);
    Gpt2Activations a(c, 1, 12);
    fill_tokens(a, c.vocab_size, 21);
    run.step(a, false);
    // Logits of every position from the full forward pass.
    std::vector<float> full(size_t(12 * c.vocab_size));
    const float* wte = run.params.data() + run.model.layout().find("wte.weight").offset;
    kernels::classifier_logits(full.data(), a.lnf.data(), wte, 12, c.n_embd, c.vocab_size);

    Generator g(c, run.model.layout(), run.params.data());
    std::span<const int32_t> tokens(a.inputs.data(), 12);
    auto logits = g.feed(tokens.subspan(0, 5));  // a prompt, then one token at a time
    EXPECT_LT(
        test::max_abs_diff(logits.data(), full.data() + 4 * c.vocab_size, size_t(c.vocab_size)),
        1e-4);
    for (int t = 5; t < 12; ++t) {
        logits = g.feed(tokens.subspan(size_t(t), 1));
        ASSERT_LT(
            test::max_abs_diff(logits.data(), full.data() + t * c.vocab_size, size_t(c.vocab_size)),
            1e-4)
            << "position " << t;
    }
}

TEST(Gpt2, InitialisationDependsOnlyOnSeedAndName) {
    ModelConfig c = small_config(), wide = small_config();
    wide.vocab_multiple = 256;  // a different padding moves offsets, not values
    ModelRun a(c, 42), b(wide, 42), other(c, 43);
    for (const ParamSpec& t : a.model.layout().tensors) {
        const ParamSpec& u = b.model.layout().find(t.name);
        EXPECT_EQ(0, test::max_abs_diff(a.params.data() + t.offset, b.params.data() + u.offset,
                                        size_t(t.numel_logical())))
            << t.name;
    }
    const ParamSpec& w = a.model.layout().find("h.0.attn.c_attn.weight");
    EXPECT_GT(test::max_abs_diff(a.params.data() + w.offset, other.params.data() + w.offset,
                                 size_t(w.numel_logical())),
              0.0);
}

TEST(Gpt2, ConfigErrorsNameTheValues) {
    ModelConfig c = small_config();
    c.n_head = 5;
    try {
        c.validate("test.toml");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("n_embd 32 is not divisible by n_head 5"),
                  std::string::npos)
            << e.what();
    }
}

TEST(Gpt2, SamplingRespectsTopKAndTemperature) {
    std::vector<float> logits = {0.0f, 5.0f, 1.0f, 4.9f};
    SampleOptions o;
    o.temperature = 0;
    EXPECT_EQ(pick_token(logits, o, 0.5f), 1);
    o.temperature = 1;
    o.top_k = 2;
    for (float u : {0.0f, 0.3f, 0.6f, 0.99f}) {
        int32_t t = pick_token(logits, o, u);
        EXPECT_TRUE(t == 1 || t == 3) << t;
    }
    o.top_k = 0;
    o.top_p = 0.01f;  // only the most likely survives
    EXPECT_EQ(pick_token(logits, o, 0.99f), 1);
}

// sampling_weights' candidates in the order of its first version (a partial_sort of every id
// through the logits, kept here as the reference), whichever sort it now takes: the weights, their
// sum and the top-p cut follow from that order alone. A vocabulary of SmolLM's size with ties, -0
// beside +0 and -inf, at small and large top-k, top-p and temperatures.
TEST(Gpt2, SamplingWeightsKeepTheirOrder) {
    const int64_t V = 49152;
    std::vector<float> logits = test::random_vector(size_t(V), 7, 3.0f);
    for (int64_t i = 0; i < V; i += 97) logits[size_t(i)] = logits[size_t((i * 31) % V)];
    logits[5] = 0.0f, logits[6] = -0.0f, logits[7] = 0.0f;
    logits[8] = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    for (float t : {1.0f, 0.7f})
        for (int64_t k : {0, 40, 1000, 30000})
            for (float p : {1.0f, 0.9f}) {
                SampleOptions o;
                o.temperature = t, o.top_k = k, o.top_p = p;
                const size_t keep = size_t(k > 0 ? k : V);
                std::vector<int32_t> want = order;
                std::partial_sort(want.begin(), want.begin() + ptrdiff_t(keep), want.end(),
                                  [&](int32_t a, int32_t b) {
                                      return logits[size_t(a)] > logits[size_t(b)] ||
                                             (logits[size_t(a)] == logits[size_t(b)] && a < b);
                                  });
                const SamplingWeights got = sampling_weights(logits, o);
                const std::string at = fmt::format("T {} top_k {} top_p {}", t, k, p);
                ASSERT_LE(got.ids.size(), keep) << at;
                if (p == 1.0f) {
                    EXPECT_EQ(got.ids.size(), keep) << at;
                }
                want.resize(got.ids.size());
                EXPECT_EQ(got.ids, want) << at;
            }
}

TEST(Gpt2, GenerationRefusesAPromptOutsideTheVocabularyAndKeepsToTheLimit) {
    ModelConfig c = small_config();
    ModelRun run(c);
    const std::vector<int32_t> good = {1, 96}, past = {1, 97}, negative = {-1};
    EXPECT_NO_THROW(check_prompt(c, good));
    for (const auto* bad : {&past, &negative}) {
        try {
            check_prompt(c, *bad);
            FAIL() << "no error for " << bad->back();
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary of 97 ids"),
                      std::string::npos)
                << e.what();
        }
    }
    SampleOptions o;
    o.tokens = 40;
    EXPECT_THROW(generate(c, run.model.layout(), run.params.data(), past, o), Error);
    // Sampling with no limit reaches ids at 10 and past; with the limit it never does.
    const auto any_at_or_past = [](const std::vector<int32_t>& ids, int32_t v) {
        return std::any_of(ids.begin(), ids.end(), [v](int32_t t) { return t >= v; });
    };
    EXPECT_TRUE(any_at_or_past(generate(c, run.model.layout(), run.params.data(), good, o), 10));
    o.vocab_limit = 10;
    EXPECT_FALSE(any_at_or_past(generate(c, run.model.layout(), run.params.data(), good, o), 10));
}

TEST(Gpt2, GenerationStopsAtTheStopToken) {
    ModelConfig c = small_config();
    ModelRun run(c);
    const std::vector<int32_t> prompt = {1, 2};
    SampleOptions o;
    o.tokens = 40;
    const std::vector<int32_t> all = generate(c, run.model.layout(), run.params.data(), prompt, o);
    ASSERT_EQ(all.size(), 40u);
    // The same seed picks the same ids: stopping at the fifth ends there, without it.
    o.stop_token = all[4];
    const auto first = std::find(all.begin(), all.end(), all[4]);
    std::vector<int32_t> seen;
    const std::vector<int32_t> stopped = generate(c, run.model.layout(), run.params.data(), prompt,
                                                  o, [&](int32_t t) { seen.push_back(t); });
    EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), first));
    EXPECT_EQ(seen, stopped);
}
