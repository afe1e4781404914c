// The serving engine without sockets: batch invariance (a request's tokens and logprobs alone,
// among 15 others, in prompt chunks of any size, preempted, and as `weft sample`'s generate) for
// every family, the paged KV pool's waiting, preemption and refusals, and stop strings held back
// from a stream.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/check.hpp"
#include "support/draft_weights.hpp"
#include "support/ppd_prompts.hpp"
#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/data/hf_tokenizer.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"
#include "weft/serve/chat_format.hpp"
#include "weft/serve/engine.hpp"
#include "weft/serve/http_front.hpp"
#include "weft/serve/json_prefix.hpp"
#include "weft/serve/stop_text.hpp"

using namespace weft;
using namespace weft::serve;

namespace {

// gpt2, llama (grouped-query), qwen2 (q/k/v biases) or moe (Mixtral's routing: top 2 of 4).
model::ModelConfig small_config(const std::string& family) {
    model::ModelConfig c = model::model_preset(family == "gpt2" ? "tiny" : family + "-tiny");
    c.vocab_size = 97;
    c.n_positions = 64;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    if (family != "gpt2") {
        c.n_kv_head = 2;
        c.n_inner = 48;
    }
    if (family == "qwen2") {  // heads of 16, as its packed q/k/v bias wants
        c.n_head = 2;
        c.n_kv_head = 1;
    }
    return c;
}

struct Weights {
    explicit Weights(const model::ModelConfig& c)
        : model(model::make_model(c)), params(model->layout().total) {
        model::init_params(params.data(), model->layout(), 3);
        // Larger than initialisation's 0.02, so that logits differ in their low bits wherever
        // the arithmetic does.
        for (int64_t i = 0; i < params.size(); ++i) params[i] *= 6.0f;
    }
    std::unique_ptr<model::Model> model;
    Buffer params;
};

std::vector<int32_t> tokens(int64_t n, uint64_t seed, int64_t V) {
    Philox rng = philox_for(seed, "prompt");
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(rng.uniform(uint64_t(i)) * float(V));
    return t;
}

Request request(std::vector<int32_t> prompt, int64_t max_tokens, float temperature, uint64_t seed) {
    Request r;
    r.prompt = std::move(prompt);
    r.o.tokens = max_tokens;
    r.o.temperature = temperature;
    r.o.seed = seed;
    return r;
}

// Steps the engine until every stream is done; returns each one's merged output.
std::vector<Update> run_all(Engine& e, const std::vector<std::shared_ptr<Stream>>& streams) {
    std::vector<Update> all(streams.size());
    for (int guard = 0; guard < 10000; ++guard) {
        e.step();
        bool done = true;
        for (size_t i = 0; i < streams.size(); ++i) {
            Update u;
            while (streams[i]->take(u, std::chrono::milliseconds(0))) all[i].merge(u);
            done = done && all[i].done();
        }
        if (done) return all;
    }
    ADD_FAILURE() << "the engine did not finish";
    return all;
}

EngineOptions options(int slots, int64_t batch_tokens, int64_t kv_blocks = 1000) {
    EngineOptions o;
    o.slots = slots, o.batch_tokens = batch_tokens, o.kv_blocks = kv_blocks;
    return o;
}

std::string piece(int32_t t) {
    return std::string(1, char('a' + t % 26));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What `weft sample` gives a request (model::generate), and the log-probability of each of its
// tokens through the Generator `weft sample` runs.
Update sampled_alone(const model::ModelConfig& c, const Weights& w, const Request& r,
                     bool bf16 = false) {
    Update u;
    const auto& L = w.model->layout();
    u.tokens = model::generate(c, L, w.params.data(), r.prompt, r.o, {}, bf16);
    model::Generator g(c, L, w.params.data(), bf16);
    std::span<const float> logits = g.feed(r.prompt);
    for (int32_t t : u.tokens) {
        u.logprobs.push_back(model::token_logprob(logits, t));
        logits = g.feed(std::span<const int32_t>(&t, 1));
    }
    return u;
}

// The log-probability of each prompt token after the first under the prompt before it, through
// the Generator `weft sample` runs: one-token steps.
std::vector<float> prompt_scores(const model::ModelConfig& c, const Weights& w,
                                 std::span<const int32_t> prompt, bool bf16 = false) {
    model::Generator g(c, w.model->layout(), w.params.data(), bf16);
    std::vector<float> out;
    for (size_t k = 0; k + 1 < prompt.size(); ++k)
        out.push_back(model::token_logprob(g.feed(prompt.subspan(k, 1)), prompt[k + 1]));
    return out;
}

// Each output has the tokens and logprob bits `weft sample` gives its request.
void expect_as_sampled(const model::ModelConfig& c, const Weights& w,
                       const std::vector<Request>& requests, const std::vector<Update>& out,
                       bool bf16 = false) {
    for (size_t i = 0; i < requests.size(); ++i) {
        const Update sample = sampled_alone(c, w, requests[i], bf16);
        EXPECT_EQ(out[i].tokens, sample.tokens) << "request " << i;
        EXPECT_TRUE(same_bits(out[i].logprobs, sample.logprobs)) << "request " << i;
    }
}

}  // namespace

class ServeEngine : public ::testing::TestWithParam<std::string> {};

// The logits after a prompt fed in chunks of 1, 3, 8 and all 40 tokens: the same bits, as every
// product, norm and attention row is computed alike whatever the rows of the call.
TEST_P(ServeEngine, PromptChunksDoNotChangeABit) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    model::RowForward f(c, w.model->layout(), w.params.data());
    const std::vector<int32_t> prompt = tokens(40, 1, c.vocab_size);
    auto logits_in_chunks = [&](int64_t chunk) -> std::vector<float> {
        model::KvPool pool(3, c.n_layer, f.kv_width(), c.head_dim());
        model::BlockTable table;
        EXPECT_TRUE(pool.grow(table, 40));
        std::vector<float> last;
        for (int64_t p = 0; p < 40; p += chunk) {
            const int64_t n = std::min<int64_t>(chunk, 40 - p);
            model::RowBatch b;
            b.add(std::span<const int32_t>(prompt).subspan(size_t(p), size_t(n)), p, table, true);
            const std::span<const float> l = f.run(b, pool);
            last.assign(l.begin(), l.end());
        }
        return last;
    };
    const std::vector<float> whole = logits_in_chunks(40);
    ASSERT_EQ(whole.size(), size_t(c.vocab_size));
    for (int64_t chunk : {1, 3, 8}) EXPECT_TRUE(same_bits(logits_in_chunks(chunk), whole)) << chunk;
}

// The warm-up forward leaves nothing behind: its KV blocks free again, and a request after it
// the tokens and logprob bits `weft sample` gives, in fp32 and bf16.
TEST_P(ServeEngine, WarmUpLeavesNoTrace) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    for (bool bf16 : {false, true}) {
        EngineOptions o = options(2, 16);
        o.bf16 = bf16;
        Engine e(c, w.model->layout(), w.params.data(), piece, o);
        EXPECT_GE(e.warm_up(), 0.0);
        EXPECT_EQ(e.stats().kv_blocks_used, 0);
        const Request r = request(tokens(9, 3, c.vocab_size), 6, 0.8f, 5);
        expect_as_sampled(c, w, {r}, run_all(e, {e.submit(r)}), bf16);
        EXPECT_EQ(e.stats().kv_blocks_used, 0);
    }
}

// One request alone and among 15 others (greedy and sampled, long and short prompts, joining at
// different steps) with prompt chunks of 16, 64 and 512: the tokens and logprob bits of `weft
// sample`'s generate.
TEST_P(ServeEngine, RequestIsBatchInvariant) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const auto& L = w.model->layout();
    for (float temperature : {0.0f, 0.9f}) {
        const Request mine = request(tokens(21, 7, c.vocab_size), 12, temperature, 11);
        const Update sample = sampled_alone(c, w, mine);
        ASSERT_EQ(sample.tokens.size(), 12u);
        for (int64_t chunk : {16, 64, 512}) {
            Engine solo(c, L, w.params.data(), piece, options(1, chunk));
            const Update alone = run_all(solo, {solo.submit(mine)})[0];
            EXPECT_EQ(alone.finish_reason, "length");
            EXPECT_EQ(alone.tokens, sample.tokens) << "chunk " << chunk;
            EXPECT_TRUE(same_bits(alone.logprobs, sample.logprobs)) << "chunk " << chunk;

            Engine e(c, L, w.params.data(), piece, options(16, chunk));
            std::vector<std::shared_ptr<Stream>> streams;
            for (int i = 0; i < 7; ++i)
                streams.push_back(
                    e.submit(request(tokens(5 + 6 * i, 20 + i, c.vocab_size), 9, 0.7f, i)));
            e.step();  // these are under way when it joins
            streams.insert(streams.begin(), e.submit(mine));
            for (int i = 7; i < 15; ++i)
                streams.push_back(
                    e.submit(request(tokens(3 + 3 * i, 20 + i, c.vocab_size), 15, 0.0f, i)));
            const std::vector<Update> among = run_all(e, streams);
            EXPECT_EQ(among[0].tokens, sample.tokens) << "chunk " << chunk;
            EXPECT_TRUE(same_bits(among[0].logprobs, sample.logprobs)) << "chunk " << chunk;
            EXPECT_EQ(e.stats().kv_blocks_used, 0);
            EXPECT_EQ(e.stats().requests_done, 16);
        }
    }
}

// A request whose answer shows no log-probabilities (Request::logprobs false) gets the same
// tokens, sampled or greedy, with NaN in each log-probability's place: none was computed.
TEST_P(ServeEngine, TokensWithoutLogprobsAreTheSame) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    for (float temperature : {0.0f, 0.9f}) {
        Request mine = request(tokens(9, 5, c.vocab_size), 10, temperature, 3);
        const Update sample = sampled_alone(c, w, mine);
        mine.logprobs = false;
        Engine e(c, w.model->layout(), w.params.data(), piece, options(4, 64));
        const Update got = run_all(e, {e.submit(mine)})[0];
        EXPECT_EQ(got.tokens, sample.tokens) << "temperature " << temperature;
        ASSERT_EQ(got.logprobs.size(), got.tokens.size());
        for (float lp : got.logprobs) EXPECT_TRUE(std::isnan(lp));
    }
}

// A pool of 5 blocks for 4 requests that each grow to 3: running requests that need a block
// preempt the newest, which is recomputed later; every output is still `weft sample`'s, bit for
// bit, and the pool ends empty.
TEST_P(ServeEngine, PreemptedRequestsKeepTheirBits) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    std::vector<Request> requests;
    for (int i = 0; i < 4; ++i)
        requests.push_back(
            request(tokens(10 + i, 40 + i, c.vocab_size), 30, i % 2 ? 0.8f : 0.0f, i));
    Engine e(c, w.model->layout(), w.params.data(), piece, options(4, 8, 5));
    std::vector<std::shared_ptr<Stream>> streams;
    for (const Request& r : requests) streams.push_back(e.submit(r));
    const std::vector<Update> out = run_all(e, streams);
    EXPECT_GT(e.stats().preemptions, 0);
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    expect_as_sampled(c, w, requests, out);
}

// Prefix caching: a request whose first 32 prompt positions are another's (finished) takes their
// blocks instead of computing them, and answers with the bits of `weft sample`; so does one with
// the same whole prompt (all full blocks but the one holding its last token).
TEST_P(ServeEngine, SharedPrefixBlocksKeepTheBits) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const std::vector<int32_t> prompt = tokens(40, 5, c.vocab_size);
    std::vector<int32_t> longer = prompt;
    for (int32_t t : tokens(6, 6, c.vocab_size)) longer.push_back(t);
    Engine e(c, w.model->layout(), w.params.data(), piece, options(4, 16));
    const Request first = request(prompt, 6, 0.0f, 1);
    run_all(e, {e.submit(first)});
    EXPECT_EQ(e.stats().prefix_cache_hit_tokens, 0);
    const std::vector<Request> later{request(longer, 8, 0.0f, 2), request(prompt, 8, 0.9f, 3)};
    const std::vector<Update> out = run_all(e, {e.submit(later[0]), e.submit(later[1])});
    EXPECT_EQ(e.stats().prefix_cache_hit_tokens, 64);
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    expect_as_sampled(c, w, later, out);
}

// A request that scores its prompt (OpenAI's echo with logprobs): each prompt token's
// log-probability the bits of one-token steps, in prompt chunks of 8 and 64, after another
// request published the same prompt's blocks (which it must not take), and preempted among
// others; its own tokens stay `weft sample`'s.
TEST_P(ServeEngine, PromptScoresAreOneTokenSteps) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const auto& L = w.model->layout();
    Request scored = request(tokens(30, 9, c.vocab_size), 10, 0.0f, 4);
    scored.prompt_logprobs = true;
    const std::vector<float> want = prompt_scores(c, w, scored.prompt);
    ASSERT_EQ(want.size(), 29u);
    for (int64_t chunk : {8, 64}) {
        Engine e(c, L, w.params.data(), piece, options(4, chunk));
        run_all(e, {e.submit(request(scored.prompt, 2, 0.0f, 1))});
        const Update out = run_all(e, {e.submit(scored)})[0];
        EXPECT_EQ(e.stats().prefix_cache_hit_tokens, 0) << "chunk " << chunk;
        EXPECT_TRUE(same_bits(out.prompt_logprobs, want)) << "chunk " << chunk;
        expect_as_sampled(c, w, {scored}, {out});
        Request only = scored;  // max_tokens 0: the scores alone
        only.o.tokens = 0;
        const Update none = run_all(e, {e.submit(only)})[0];
        EXPECT_TRUE(same_bits(none.prompt_logprobs, want)) << "chunk " << chunk;
        EXPECT_TRUE(none.tokens.empty());
        EXPECT_EQ(none.finish_reason, "length");
    }
    std::vector<Request> requests;
    for (int i = 0; i < 3; ++i)
        requests.push_back(request(tokens(10 + i, 40 + i, c.vocab_size), 30, 0.0f, i));
    requests.push_back(scored);
    Engine e(c, L, w.params.data(), piece, options(4, 8, 5));
    std::vector<std::shared_ptr<Stream>> streams;
    for (const Request& r : requests) streams.push_back(e.submit(r));
    const std::vector<Update> out = run_all(e, streams);
    EXPECT_GT(e.stats().preemptions, 0);
    EXPECT_TRUE(same_bits(out.back().prompt_logprobs, want));
    expect_as_sampled(c, w, requests, out);
}

// The choices of one submission (OpenAI's `n`, and a batch of prompts): choice 0 of a prompt is
// that request alone, bit for bit, wherever it sits in the submission; its choices 1 and 2 draw
// from streams of their own, so sampled they differ.
TEST_P(ServeEngine, ChoicesDrawApart) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const Request r = request(tokens(12, 3, c.vocab_size), 16, 0.9f, 5);
    const Request other = request(tokens(9, 4, c.vocab_size), 16, 0.9f, 5);
    std::vector<Request> choices{other, r, r, r};
    for (int64_t k = 1; k < 4; ++k) choices[size_t(k)].choice = k - 1;
    Engine e(c, w.model->layout(), w.params.data(), piece, options(4, 16));
    const std::shared_ptr<Stream> out = e.submit(choices);
    ASSERT_EQ(out->choices(), 4u);
    std::vector<Update> all(4), news;
    auto done = [&] {
        return std::all_of(all.begin(), all.end(), [](const Update& u) { return u.done(); });
    };
    for (int guard = 0; guard < 1000 && !done(); ++guard) {
        e.step();
        for (size_t k : out->take(news, std::chrono::milliseconds(0))) all[k].merge(news[k]);
    }
    expect_as_sampled(c, w, {other, r}, {all[0], all[1]});
    EXPECT_NE(all[2].tokens, all[1].tokens);
    EXPECT_NE(all[3].tokens, all[2].tokens);
    EXPECT_EQ(e.stats().requests_done, 4);
}

// --dtype bf16: products on weights rounded once; the same invariance, against `weft sample
// --dtype bf16`, and other bits than fp32's.
TEST_P(ServeEngine, Bf16IsBatchInvariantToo) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const Request mine = request(tokens(21, 7, c.vocab_size), 10, 0.0f, 11);
    const Update sample = sampled_alone(c, w, mine, true);
    EXPECT_FALSE(same_bits(sample.logprobs, sampled_alone(c, w, mine).logprobs));
    EngineOptions o = options(8, 16);
    o.bf16 = true;
    Engine e(c, w.model->layout(), w.params.data(), piece, o);
    std::vector<std::shared_ptr<Stream>> streams{e.submit(mine)};
    for (int i = 0; i < 7; ++i)
        streams.push_back(e.submit(request(tokens(4 + 5 * i, 50 + i, c.vocab_size), 8, 0.7f, i)));
    const std::vector<Update> among = run_all(e, streams);
    EXPECT_EQ(among[0].tokens, sample.tokens);
    EXPECT_TRUE(same_bits(among[0].logprobs, sample.logprobs));
}

// --spec draft among other requests, fp32 and bf16, and fp32 with --draft-width 2 (greedy leaves
// beside the chain): greedy requests keep plain sampling's tokens and logprob bits, a seeded
// sampling request gives weft sample --spec draft's tokens (the same draws), the draft's guesses
// are both kept and rejected, and the draft runs one forward a guess depth for all the requests
// (3 a step at most), not one a request.
TEST_P(ServeEngine, DraftKeepsTheOutput) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    model::ModelConfig dc = c;  // the draft: the model's first layer alone
    dc.n_layer = 1;
    Weights d(dc);
    test::copy_target_tensors(w.model->layout(), w.params.data(), d.model->layout(),
                              d.params.data());
    for (auto [bf16, width] : {std::pair{false, 1}, {true, 1}, {false, 2}}) {
        auto draft = [&] {
            return std::make_unique<decode::DraftModel>(dc, d.model->layout(), d.params.data(),
                                                        bf16, 64);
        };
        EngineOptions o = options(8, 64);
        o.bf16 = bf16;
        o.spec.kind = "draft";
        o.spec.draft_width = width;
        o.spec.draft = "unused";  // the model is given
        o.spec.ngram.max_tokens = 3;
        std::unique_ptr<decode::DraftModel> engine_draft = draft();
        const decode::DraftModel& counted = *engine_draft;
        Engine e(c, w.model->layout(), w.params.data(), piece, o, std::move(engine_draft));
        std::vector<Request> requests;
        std::vector<std::shared_ptr<Stream>> streams;
        // The first request's text ends at the context's end (40 + 24 = 64 positions), where the
        // leaves beside a chain have no slots left.
        for (int i = 0; i < 6; ++i) {
            requests.push_back(request(tokens(i == 0 ? 40 : 5 + i, 40 + i, c.vocab_size), 24,
                                       i == 5 ? 0.8f : 0.0f, 80 + i));
            streams.push_back(e.submit(requests.back()));
        }
        const std::vector<Update> out = run_all(e, streams);
        expect_as_sampled(c, w, std::vector<Request>(requests.begin(), requests.end() - 1), out,
                          bf16);
        const Request& s = requests.back();
        const std::unique_ptr<decode::DraftModel> alone = draft();
        EXPECT_EQ(out.back().tokens,
                  decode::generate_speculative(c, w.model->layout(), w.params.data(), s.prompt, s.o,
                                               o.spec, {}, bf16, nullptr, alone.get()));
        // Five greedy requests of 24 tokens, each verify 3 guesses, and with leaves more.
        if (width > 1) {
            EXPECT_GT(e.stats().spec_guessed, 3 * e.stats().spec_verifies) << "no leaf was guessed";
        }
        EXPECT_GT(e.stats().spec_accepted, 0) << "no guess was ever kept";
        EXPECT_LT(e.stats().spec_accepted, e.stats().spec_guessed) << "no guess was rejected";
        EXPECT_LE(counted.forwards(), 3 * e.stats().steps) << "the draft ran per request";
        EXPECT_GT(e.stats().spec_verifies, 0);
    }
}

// --spec ppd, fp32 and bf16, one request alone and six among each other (one sampling), and in a
// pool small enough to preempt; and fp32 with a sparse tree of 5 guesses (--spec-tree), six among
// each other: greedy requests keep plain sampling's tokens and logprob bits, a seeded sampling
// request gives weft sample --spec ppd's tokens, guesses are kept, and the prompt rows leave no
// block behind.
TEST_P(ServeEngine, PpdKeepsTheOutput) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    const auto& L = w.model->layout();
    auto prompts = std::make_shared<const decode::PpdPrompts>(
        test::train_ppd_prompts(c, L, w.params.data(), 0, 60).prompts);
    for (auto [bf16, tree] : {std::pair{false, 0}, {true, 0}, {false, 5}}) {
        std::vector<Request> requests;
        for (int i = 0; i < 6; ++i)
            requests.push_back(request(std::vector<int32_t>{int32_t(1 + i % 4), int32_t(9 + i)}, 24,
                                       i == 5 ? 0.8f : 0.0f, 90 + i));
        requests[0].prompt_logprobs = true;  // its prompt ends without a chain of prompt rows
        // Alone, among the others, and preempted (7 blocks of 16 for requests of 3 each).
        for (auto [slots, blocks, n] :
             std::vector<std::tuple<int, int64_t, int>>{{1, 1000, 1}, {8, 1000, 6}, {6, 7, 6}}) {
            if (tree > 0 && slots != 8) continue;  // the tree among the others only
            EngineOptions o = options(slots, 8, blocks);
            o.bf16 = bf16;
            o.spec.kind = "ppd";
            o.spec.ppd = prompts;
            o.spec.ngram.max_tokens = 3;
            o.spec.tree = tree;
            Engine e(c, L, w.params.data(), piece, o);
            const std::vector<Request> mine(requests.begin(), requests.begin() + n);
            std::vector<std::shared_ptr<Stream>> streams;
            for (const Request& r : mine) streams.push_back(e.submit(r));
            const std::vector<Update> out = run_all(e, streams);
            const size_t greedy = std::min<size_t>(mine.size(), 5);
            expect_as_sampled(c, w, std::vector<Request>(mine.begin(), mine.begin() + greedy), out,
                              bf16);
            if (mine.size() == 6 &&
                blocks > 7) {  // a preempted request keeps its law, not its draws
                const Request& s = mine.back();
                EXPECT_EQ(out.back().tokens,
                          decode::generate_speculative(c, L, w.params.data(), s.prompt, s.o, o.spec,
                                                       {}, bf16));
            }
            EXPECT_TRUE(
                same_bits(out[0].prompt_logprobs, prompt_scores(c, w, mine[0].prompt, bf16)));
            if (n > 1) {
                EXPECT_GT(e.stats().spec_accepted, 0) << "no guess was ever kept";
            }
            if (tree > 0) {  // a chain guesses at most 3 a verify
                EXPECT_GT(e.stats().spec_guessed, 3 * e.stats().spec_verifies) << "no tree";
            }
            EXPECT_EQ(e.stats().kv_blocks_used, 0);
            if (blocks == 7) {
                EXPECT_GT(e.stats().preemptions, 0);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, ServeEngine, ::testing::Values("gpt2", "llama", "qwen2", "moe"));

// A pool of 4 blocks of 16 positions: requests whose prompts fill 2 blocks run two at a time and
// the others wait; one larger than the pool or past the context is refused by name.
TEST(ServeEngineQueue, RequestsWaitForKvBlocks) {
    const model::ModelConfig c = small_config("gpt2");
    Weights w(c);
    Engine e(c, w.model->layout(), w.params.data(), piece, options(8, 64, 4));
    std::vector<std::shared_ptr<Stream>> streams;
    for (int i = 0; i < 5; ++i)
        streams.push_back(e.submit(request(tokens(20, 30 + i, c.vocab_size), 12, 0.0f, 1)));
    e.step();
    EXPECT_EQ(e.stats().running, 2);
    EXPECT_EQ(e.stats().waiting, 3);
    EXPECT_EQ(e.stats().kv_blocks_used, 4);
    for (const Update& u : run_all(e, streams)) EXPECT_EQ(u.tokens.size(), 12u);
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    EXPECT_EQ(e.stats().generated_tokens, 60);

    Engine small(c, w.model->layout(), w.params.data(), piece, options(8, 64, 3));
    EXPECT_NE(test::error_of([&] {
                  small.check(request(tokens(40, 1, c.vocab_size), 20, 0, 1));
              }).find("needs 4 KV cache blocks of 16 positions, more than the pool's 3"),
              std::string::npos);
    Engine big(c, w.model->layout(), w.params.data(), piece, options(8, 64, 100));
    EXPECT_NE(test::error_of([&] {
                  big.check(request(tokens(40, 1, c.vocab_size), 30, 0, 1));
              }).find("make 70 positions, past the model's context of 64"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { big.check(request({}, 3, 0, 1)); }).find("the prompt is empty"),
              std::string::npos);
}

// A stream never sends what a stop string then ends, nor half a UTF-8 character.
TEST(ServeStopText, HoldsBackWhatMayBecomeAStop) {
    StopText t({"END", "xy"});
    bool stopped = false;
    EXPECT_EQ(t.add("abc E", stopped), "abc ");  // "E" may begin "END"
    EXPECT_FALSE(stopped);
    EXPECT_EQ(t.add("Nx", stopped), "EN");    // "ENx" begins no stop; "x" may begin "xy"
    EXPECT_EQ(t.add("y tail", stopped), "");  // "xy" found: nothing before it is left
    EXPECT_TRUE(stopped);

    StopText u({});
    EXPECT_EQ(u.add("caf\xc3", stopped), "caf");  // the first byte of "é"
    EXPECT_EQ(u.add("\xa9!", stopped), "\xc3\xa9!");
    EXPECT_EQ(u.flush(), "");
}

// Speculation in the engine (docs/decoding.md): greedy requests verifying prompt-lookup guesses
// among others keep plain `weft sample`'s tokens and logprob bits, and a seeded sampling request
// gives `weft sample --spec ngram`'s tokens.
TEST_P(ServeEngine, SpeculationKeepsTheOutput) {
    const model::ModelConfig c = small_config(GetParam());
    Weights w(c);
    EngineOptions o = options(8, 64);
    o.spec.kind = "ngram";
    o.spec.ngram.max_tokens = 5;
    Engine e(c, w.model->layout(), w.params.data(), piece, o);
    std::vector<Request> requests;
    std::vector<std::shared_ptr<Stream>> streams;
    for (int i = 0; i < 6; ++i) {
        // Prompts that repeat themselves, so that guesses are found; one sampling request.
        std::vector<int32_t> p = tokens(3, 10 + i, c.vocab_size), twice;
        for (int k = 0; k < 4; ++k) twice.insert(twice.end(), p.begin(), p.end());
        requests.push_back(request(twice, 24, i == 5 ? 0.8f : 0.0f, 70 + i));
        streams.push_back(e.submit(requests.back()));
    }
    // Greedy with penalties (OpenAI's and the repetition penalty) and a bias: each verify row
    // chosen from as a step without guesses would, so the same tokens and logprob bits as an
    // engine that does not speculate.
    Request penalised = requests[0];
    penalised.presence_penalty = 2.0f;
    penalised.frequency_penalty = 1.5f;
    penalised.repetition_penalty = 1.3f;
    const int32_t first = sampled_alone(c, w, requests[0]).tokens[0];
    penalised.logit_bias = {{first, -100.0f}, {int32_t((first + 1) % c.vocab_size), 1.5f}};
    streams.push_back(e.submit(penalised));
    const std::vector<Update> out = run_all(e, streams);
    expect_as_sampled(c, w, std::vector<Request>(requests.begin(), requests.end() - 1), out);
    const Request& s = requests.back();
    EXPECT_EQ(out[5].tokens, decode::generate_speculative(c, w.model->layout(), w.params.data(),
                                                          s.prompt, s.o, o.spec));
    EXPECT_GT(e.stats().spec_accepted, 0) << "no guess was ever kept";
    Engine plain(c, w.model->layout(), w.params.data(), piece, options(8, 64));
    const Update want = run_all(plain, {plain.submit(penalised)})[0];
    EXPECT_NE(want.tokens, out[0].tokens) << "the penalties changed nothing";
    EXPECT_EQ(out.back().tokens, want.tokens);
    EXPECT_TRUE(same_bits(out.back().logprobs, want.logprobs));
}

// JSON mode's vocabulary: ids 0-255 the bytes alone (as a byte-level BPE's are), then pieces of
// JSON, id 319 the end of text.
constexpr int32_t kJsonVocab = 320, kJsonStop = 319, kJsonPieces = 256;
std::string json_piece(int32_t t) {
    static const char* const pieces[] = {
        "{",    "}",     "\"",  "\"a\":", ":",    ",",    "1",  "[",   "]",  " ",
        "true", "\"b\"", "\\n", "x",      "-2.5", "null", "}}", "\"}", "]}", "\n",
    };
    if (t < kJsonPieces) return std::string(1, char(t));
    return t == kJsonStop ? "<eot>" : pieces[(t - kJsonPieces) % 20];
}

// What a request in JSON mode must generate, one token at a time through `weft sample`'s
// Generator: each token chosen from the model's logits with every id the text so far cannot take
// masked, drawn as the engine draws (choice 0's stream), with the model's own log-probability.
Update json_alone(const model::ModelConfig& c, const Weights& w, const Request& r) {
    std::vector<std::string> pieces;
    for (int32_t t = 0; t < c.vocab_size; ++t) pieces.push_back(json_piece(t));
    const JsonVocab vocab(pieces);
    JsonPrefix text(r.json_schema.get());
    Update u;
    model::Generator g(c, w.model->layout(), w.params.data());
    std::span<const float> logits = g.feed(r.prompt);
    const Philox rng = philox_for(r.o.seed, "sample");
    for (int64_t i = 0; i < r.o.tokens; ++i) {
        std::vector<float> masked(logits.begin(), logits.end());
        vocab.mask(text, kJsonStop, masked);
        const int32_t t = model::pick_token(masked, r.o, rng.uniform(uint64_t(i)));
        if (t == kJsonStop) {
            u.finish_reason = "stop";
            return u;
        }
        EXPECT_TRUE(text.feed(json_piece(t)));
        u.tokens.push_back(t);
        u.logprobs.push_back(model::token_logprob(logits, t));
        u.text += json_piece(t);
        logits = g.feed(std::span<const int32_t>(&t, 1));
    }
    u.finish_reason = "length";
    return u;
}

// JSON mode among other requests, greedy and sampled, with and without speculation: the tokens
// and logprob bits of a one-token-at-a-time masked decode; a finished text is one JSON object.
TEST(ServeEngineJson, MasksEveryStepAsAlone) {
    model::ModelConfig c = small_config("llama");
    c.vocab_size = kJsonVocab;
    Weights w(c);
    // The last two are structured outputs: an object of an array of integers, then a string.
    const auto schema = std::make_shared<const JsonSchema>(nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
            "b": {"type": "string"}}})"));
    std::vector<Request> json_requests;
    for (int i = 0; i < 8; ++i) {
        // Prompts that repeat pieces of JSON, so that prompt lookup finds guesses to verify.
        std::vector<int32_t> prompt = tokens(2 + i, 40 + i, c.vocab_size);
        for (int k = 0; k < 2; ++k)
            prompt.insert(prompt.end(),
                          {kJsonPieces, kJsonPieces + 3, int32_t('1' + i % 4), kJsonPieces + 5,
                           kJsonPieces + 11, kJsonPieces + 4, kJsonPieces + 15, kJsonPieces + 1});
        Request r = request(prompt, 30, i % 2 ? 0.9f : 0.0f, i);
        r.o.stop_token = kJsonStop;
        r.json_object = true;
        if (i >= 6) r.json_schema = schema;
        json_requests.push_back(r);
    }
    int finished = 0;
    std::vector<Update> want;
    for (const Request& r : json_requests) {
        want.push_back(json_alone(c, w, r));
        if (want.back().finish_reason == "stop") {
            ++finished;
            const nlohmann::json v = nlohmann::json::parse(want.back().text);
            EXPECT_TRUE(v.is_object()) << want.back().text;
            if (r.json_schema) {
                EXPECT_TRUE(v.size() == 2 && v["a"].is_array() && v["b"].is_string())
                    << want.back().text;
            }
        }
    }
    EXPECT_GE(finished, 2) << "too few texts ended as an object to test their end";
    // Among plain requests without and with prompt lookup, then alone with it (so that the
    // guesses kept are JSON mode's: its verify rows masked after their paths).
    for (auto [spec, others] : {std::pair{"none", true}, {"ngram", true}, {"ngram", false}}) {
        EngineOptions o = options(8, 16);
        o.spec.kind = spec;
        Engine e(c, w.model->layout(), w.params.data(), json_piece, o);
        std::vector<std::shared_ptr<Stream>> streams;
        for (const Request& r : json_requests) {
            streams.push_back(e.submit(r));
            if (others)
                streams.push_back(e.submit(request(tokens(9, 60, c.vocab_size), 20, 0.0f, 5)));
        }
        const std::vector<Update> out = run_all(e, streams);
        for (size_t i = 0; i < json_requests.size(); ++i) {
            const Update& got = out[others ? 2 * i : i];
            JsonPrefix text(json_requests[i].json_schema.get());
            EXPECT_TRUE(text.feed(got.text)) << spec << " request " << i;
            EXPECT_EQ(text.complete(), got.finish_reason == "stop") << spec << " request " << i;
            // Speculation draws a sampled request's tokens from its own stream (the same
            // distribution, other draws): only its greedy ones have the one answer.
            if (std::string(spec) != "none" && json_requests[i].o.temperature > 0) continue;
            EXPECT_EQ(got.tokens, want[i].tokens) << spec << " request " << i;
            EXPECT_TRUE(same_bits(got.logprobs, want[i].logprobs)) << spec << " request " << i;
            EXPECT_EQ(got.finish_reason, want[i].finish_reason) << spec << " request " << i;
            EXPECT_EQ(got.text, want[i].text) << spec << " request " << i;
        }
        if (!others) {
            EXPECT_GT(e.stats().spec_accepted, 0) << "no JSON mode guess was kept";
        }
    }
    // Without JSON mode the same requests generate other texts: the mask did something.
    Request plain = json_requests[0];
    plain.json_object = false;
    EXPECT_NE(sampled_alone(c, w, plain).tokens, want[0].tokens);
    // A vocabulary that cannot write every byte alone is refused: the mask could then leave a
    // request no token (after '"' of a key whose next byte no token begins with).
    const model::ModelConfig small = small_config("llama");
    Weights ws(small);
    Engine letters(small, ws.model->layout(), ws.params.data(), piece, options(1, 16));
    Request lettered = request(tokens(4, 1, small.vocab_size), 4, 0.0f, 1);
    lettered.o.stop_token = 0;
    lettered.json_object = true;
    try {
        letters.check(lettered);
        ADD_FAILURE() << "JSON mode over a vocabulary of letters was taken";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("every byte"), std::string::npos) << err.what();
    }
    // JSON mode with no end of text token (ignore_eos) is refused by name.
    Request endless = json_requests[0];
    endless.o.stop_token = -1;
    Engine e(c, w.model->layout(), w.params.data(), json_piece, options(1, 16));
    EXPECT_THROW(
        {
            try {
                e.check(endless);
            } catch (const Error& err) {
                EXPECT_NE(std::string(err.what()).find("JSON mode"), std::string::npos);
                throw;
            }
        },
        Error);
}

// A SIGTERM while the model loads stops the front before its listen starts: listen then returns
// at once, where httplib alone would lose the stop and serve on.
TEST(HttpFront, StopBeforeListenEndsIt) {
    const model::ModelConfig c = small_config("gpt2");
    Weights w(c);
    Engine e(c, w.model->layout(), w.params.data(), piece, options(1, 16));
    const std::filesystem::path dir = WEFT_SOURCE_DIR "/tests/data/tokenizers/smollm";
    const data::HfTokenizer tok = data::HfTokenizer::load(dir / "tokenizer.json");
    const ChatFormat chat = choose_chat_format(dir, "gpt2", tok);
    const ApiContext ctx{"tiny", tok, e, chat};
    HttpFront front(ctx, e, {"127.0.0.1", 0, "", size_t(1) << 20});
    ASSERT_GT(front.bind(), 0);
    std::future<void> stopped = std::async(std::launch::async, [&] { front.stop(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the stop under way
    std::future<void> served = std::async(std::launch::async, [&] { front.listen(); });
    if (served.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        front.stop();  // it is running now: end it, so that the test fails instead of hanging
        FAIL() << "listen() still serving 10 s after stop()";
    }
    EXPECT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}
