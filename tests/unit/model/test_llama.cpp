// The Llama family, whole-model: backward against finite differences (grouped-query attention,
// RoPE with llama3 scaling, SwiGLU, tied and untied heads), the loss at initialisation, KV-cached
// generation against the full forward pass, tensor parallelism (threads as ranks, with and
// without sequence parallelism and recomputation) against one process, the analytic activation
// count against what is allocated, and the configuration errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "support/check.hpp"
#include "support/model_run.hpp"
#include "support/thread_tp.hpp"
#include "support/tp_parity.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/rmsnorm.hpp"
#include "weft/model/counts.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/llama.hpp"

using namespace weft;
using namespace weft::model;

namespace {

using ModelRun = test::ModelRun<Llama>;
using test::error_of;
using test::fill_tokens;

ModelConfig small_config(bool tied, const std::string& scaling = "") {
    ModelConfig c = model_preset("llama-tiny");
    c.vocab_size = 97;
    c.n_positions = 32;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 32;
    c.n_inner = 48;
    c.tie_embeddings = tied;
    if (!scaling.empty()) {
        // Scaled so that the test's short context crosses the smooth band of llama3.
        c.rope_scaling = {scaling, 4.0, 1.0, 4.0, 16};
        c.rope_theta = 500.0;
    }
    return c;
}

}  // namespace

class LlamaGradient : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(LlamaGradient, MatchesFiniteDifferences) {
    const auto [tied, scaling] = GetParam();
    ModelConfig c = small_config(tied, scaling);
    ModelRun run(c);
    // Larger weights than 0.02 make every path of the gradient visible above rounding; at 8x
    // the attention is peaky enough that central differences of step 2e-3 drift past 2%.
    for (int64_t i = 0; i < run.params.size(); ++i) run.params[i] *= 4.0f;
    LlamaActivations a(c, 2, 12);
    fill_tokens(a, c.vocab_size, 3);
    test::expect_finite_difference_gradients(run, a, 4, 2e-3f, test::llama_element(a, c));
}

INSTANTIATE_TEST_SUITE_P(Heads, LlamaGradient,
                         ::testing::Values(std::make_tuple(false, std::string()),
                                           std::make_tuple(true, std::string()),
                                           std::make_tuple(false, std::string("llama3")),
                                           std::make_tuple(true, std::string("linear"))),
                         [](const auto& i) {
                             return std::string(std::get<0>(i.param) ? "tied" : "untied") +
                                    (std::get<1>(i.param).empty() ? ""
                                                                  : "_" + std::get<1>(i.param));
                         });

TEST(Llama, InitialLossIsLogVocab) {
    ModelConfig c = model_preset("llama-tiny");
    ModelRun run(c, 1337);
    LlamaActivations a(c, 2, 64);
    fill_tokens(a, c.vocab_size, 11);
    EXPECT_NEAR(run.step(a, false), std::log(double(c.vocab_size)), 0.05);
}

// Meta's Llama 3.2 1B and 3B, as transformers counts them (tied head): 1,235,814,400 and
// 3,212,749,824 parameters.
TEST(Llama, Llama32PresetsHaveMetasCounts) {
    EXPECT_EQ(num_parameters(model_preset("llama-3.2-1b")), 1235814400);
    const ModelConfig c = model_preset("llama-3.2-3b");
    EXPECT_EQ(num_parameters(c), 3212749824);
    EXPECT_EQ(c.head_dim(), 128);
    EXPECT_TRUE(c.tie_embeddings);
}

TEST(Llama, TensorLayoutIsHuggingFaces) {
    const ModelConfig c = model_preset("smollm-135m");
    const ParamLayout l = build_param_layout(c);
    // SmolLM-135M: 134,515,008 parameters, as transformers counts them (tied head).
    EXPECT_EQ(num_parameters(c), 134515008);
    EXPECT_EQ(l.find("layers.0.self_attn.k_proj.weight").shape,
              (std::vector<int64_t>{192, 576}));  // 3 kv heads of 64
    EXPECT_EQ(l.find("layers.29.mlp.down_proj.weight").shape, (std::vector<int64_t>{576, 1536}));
    EXPECT_EQ(family_of(c).hf_tensor(c, l.find("norm.weight")).name, "model.norm.weight");
}

TEST(Llama, KvCachedGenerationMatchesFullForward) {
    for (bool tied : {false, true}) {
        ModelConfig c = small_config(tied, "llama3");
        ModelRun run(c);
        LlamaActivations a(c, 1, 12);
        fill_tokens(a, c.vocab_size, 21);
        run.step(a, false);
        std::vector<float> full(size_t(12 * c.vocab_size));
        const char* head = tied ? "embed_tokens.weight" : "lm_head.weight";
        const float* w = run.params.data() + run.model.layout().find(head).offset;
        kernels::classifier_logits(full.data(), a.lnf.data(), w, 12, c.n_embd, c.vocab_size);

        Generator g(c, run.model.layout(), run.params.data());
        std::span<const int32_t> tokens(a.inputs.data(), 12);
        auto logits = g.feed(tokens.subspan(0, 5));
        EXPECT_LT(
            test::max_abs_diff(logits.data(), full.data() + 4 * c.vocab_size, size_t(c.vocab_size)),
            1e-4);
        for (int t = 5; t < 12; ++t) {
            logits = g.feed(tokens.subspan(size_t(t), 1));
            ASSERT_LT(test::max_abs_diff(logits.data(), full.data() + t * c.vocab_size,
                                         size_t(c.vocab_size)),
                      1e-4)
                << "position " << t << (tied ? " tied" : " untied");
        }
    }
}

// Every buffer the activations hold, against the family's analytic count.
TEST(Llama, ActivationCountIsWhatIsAllocated) {
    const ModelConfig c = config_for_tp(small_config(false), 2);
    for (int tp : {1, 2})
        for (bool sp : {false, true})
            for (bool rc : {false, true}) {
                const LayerSpan span{0, -1, true, rc, tp, sp && tp > 1};
                LlamaActivations a(c, 2, 16, span);
                int64_t n = 0;
                for (const Buffer* b : std::initializer_list<const Buffer*>{
                         &a.resid, &a.losses, &a.ln1, &a.rstd1, &a.qkv, &a.atty, &a.lse, &a.resid2,
                         &a.ln2, &a.rstd2, &a.gu, &a.act, &a.lnf, &a.lnf_rstd, &a.dlnf})
                    n += b->size();
                n += int64_t(a.inputs.size() + a.targets.size());
                EXPECT_EQ(n, family_of(c).activation_floats(c, 2, 16, span))
                    << "tp " << tp << " sp " << sp << " recompute " << rc;
            }
}

struct TpCase {
    int tp;
    bool sp, recompute, tied;
};

class LlamaTp : public ::testing::TestWithParam<TpCase> {};

TEST_P(LlamaTp, MatchesTheSingleProcessModel) {
    const TpCase k = GetParam();
    constexpr int64_t B = 2, T = 16;
    ModelConfig base = small_config(k.tied, "llama3");
    base.n_kv_head = k.tp == 4 ? 4 : 2;  // kv heads split over tp; 4 query heads each way
    base.n_head = 8;
    const std::vector<test::TokenBatch> batches = test::make_token_batches(base, B, T, 2);
    Llama whole(base);
    const test::TrainRun ref = test::train_micro_batches(whole, batches, B, T, false);
    const ModelConfig cfg = config_for_tp(base, k.tp);
    std::vector<test::TrainRun> runs(size_t(k.tp));
    test::ThreadTpGroup group(k.tp);
    group.run([&](TpComm& comm) {
        Llama model(cfg, ModelShard{{}, comm.rank(), comm.size()}, &comm, k.sp);
        runs[size_t(comm.rank())] = test::train_micro_batches(model, batches, B, T, k.recompute);
    });
    for (int r = 0; r < k.tp; ++r) {
        EXPECT_NEAR(runs[size_t(r)].loss, ref.loss, 1e-5 * std::abs(ref.loss)) << "rank " << r;
        test::expect_grad_shards(ref, runs[size_t(r)], r, k.tp);
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LlamaTp,
                         ::testing::Values(TpCase{2, false, false, false},
                                           TpCase{2, true, false, false},
                                           TpCase{2, true, true, true},
                                           TpCase{4, true, false, false},
                                           TpCase{4, false, true, true}),
                         [](const ::testing::TestParamInfo<TpCase>& i) {
                             const TpCase& k = i.param;
                             return "tp" + std::to_string(k.tp) + (k.sp ? "_sp" : "") +
                                    (k.recompute ? "_recompute" : "") +
                                    (k.tied ? "_tied" : "_untied");
                         });

TEST(Llama, ConfigErrorsNameTheValues) {
    ModelConfig c = small_config(false);
    c.n_kv_head = 3;
    EXPECT_NE(error_of([&] {
                  c.validate("config.json");
              }).find("3 key/value heads do not divide 4 attention heads"),
              std::string::npos);
    c = small_config(false);
    c.n_embd = 48;
    c.n_head = 5;
    c.n_kv_head = 5;
    EXPECT_NE(error_of([&] {
                  c.validate("config.json");
              }).find("head_dim x heads != hidden: n_embd 48 is not divisible by n_head 5"),
              std::string::npos);
    c.n_head_dim = 16;  // an explicit head_dim makes it legal
    EXPECT_EQ(error_of([&] { c.validate("config.json"); }), "no error");
    c = small_config(false);
    c.rope_scaling.type = "yarn";
    EXPECT_NE(error_of([&] {
                  c.validate("config.json");
              }).find("rope_scaling type 'yarn' is not one weft implements"),
              std::string::npos);
    c = small_config(false);
    EXPECT_NE(error_of([&] {
                  Llama m(config_for_tp(c, 4), ModelShard{{}, 0, 4});
              }).find("4 attention heads and 2 key/value heads must both be multiples of --tp 4"),
              std::string::npos);
    c.family = "mamba";
    EXPECT_NE(error_of([&] { c.validate("x"); }).find("unknown model family 'mamba'"),
              std::string::npos);
}
