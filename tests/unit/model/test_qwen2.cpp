// The Qwen2 family: the Llama model with q/k/v biases. With zero biases it is Llama bit for bit;
// with biases its backward (biases included) matches finite differences and splits over tensor
// parallelism as q/k/v do; its tensors, count and config.json are Qwen2's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "support/check.hpp"
#include "support/model_run.hpp"
#include "support/temp_dir.hpp"
#include "support/thread_tp.hpp"
#include "support/tp_parity.hpp"
#include "weft/core/philox.hpp"
#include "weft/model/counts.hpp"
#include "weft/model/family.hpp"
#include "weft/model/llama.hpp"
#include "weft/model/state_io.hpp"

using namespace weft;
using namespace weft::model;

namespace {

using ModelRun = test::ModelRun<Llama>;
using test::error_of;
using test::fill_tokens;

// qwen2-tiny, smaller: 4 query heads of 16 sharing 2 key/value heads.
ModelConfig small_config(bool tied) {
    ModelConfig c = model_preset("qwen2-tiny");
    c.vocab_size = 97, c.n_positions = 32, c.n_inner = 48;
    c.tie_embeddings = tied;
    return c;
}

bool is_bias(const ParamSpec& p) {
    return p.name.ends_with("_proj.bias");
}

}  // namespace

TEST(Qwen2, ZeroBiasesGiveLlamaBitForBit) {
    const ModelConfig q = small_config(false);
    ModelConfig l = q;
    l.family = "llama", l.qkv_bias = false;
    ModelRun qwen(q), llama(l);
    for (const ParamSpec& p : qwen.model.layout().tensors) {
        if (is_bias(p)) continue;
        const ParamSpec& o = llama.model.layout().find(p.name);
        std::copy_n(llama.params.data() + o.offset, p.numel_stored, qwen.params.data() + p.offset);
    }
    LlamaActivations a(q, 2, 12), b(l, 2, 12);
    fill_tokens(a, q.vocab_size, 3);
    fill_tokens(b, l.vocab_size, 3);
    EXPECT_EQ(qwen.step(a, true), llama.step(b, true));
    for (const ParamSpec& p : qwen.model.layout().tensors) {
        if (is_bias(p)) continue;
        const ParamSpec& o = llama.model.layout().find(p.name);
        EXPECT_EQ(std::memcmp(qwen.grads.data() + p.offset, llama.grads.data() + o.offset,
                              size_t(p.numel_stored) * sizeof(float)),
                  0)
            << p.name;
    }
}

TEST(Qwen2, GradientsMatchFiniteDifferences) {
    for (bool tied : {false, true}) {
        const ModelConfig c = small_config(tied);
        ModelRun run(c);
        // Larger weights make every path visible above rounding (as test_llama's); biases of the
        // weights' size so that they move q, k and v, and the rotary embedding rotates them.
        for (int64_t i = 0; i < run.params.size(); ++i) run.params[i] *= 4.0f;
        for (const ParamSpec& p : run.model.layout().tensors)
            if (is_bias(p)) {
                const Philox rng = philox_for(9, p.name);
                for (int64_t i = 0; i < p.numel_stored; ++i)
                    run.params[p.offset + i] = 0.2f * rng.normal(uint64_t(i));
            }
        LlamaActivations a(c, 2, 12);
        fill_tokens(a, c.vocab_size, 3);
        test::expect_finite_difference_gradients(run, a, 4, 2e-3f, test::llama_element(a, c),
                                                 tied ? " tied" : " untied");
        int biases = 0;
        for (const ParamSpec& t : run.model.layout().tensors) biases += is_bias(t);
        EXPECT_EQ(biases, 3 * c.n_layer);
    }
}

// The packed bias splits over tp like the rows of q/k/v (column parallel).
TEST(Qwen2, TensorParallelMatchesOneProcess) {
    constexpr int64_t B = 2, T = 16;
    for (bool sp : {false, true}) {
        const ModelConfig base = small_config(false);
        const std::vector<test::TokenBatch> batches = test::make_token_batches(base, B, T, 2);
        Llama whole(base);
        const test::TrainRun ref = test::train_micro_batches(whole, batches, B, T, false);
        const ModelConfig cfg = config_for_tp(base, 2);
        std::vector<test::TrainRun> runs(2);
        test::ThreadTpGroup group(2);
        group.run([&](TpComm& comm) {
            Llama model(cfg, ModelShard{{}, comm.rank(), comm.size()}, &comm, sp);
            runs[size_t(comm.rank())] = test::train_micro_batches(model, batches, B, T, sp);
        });
        for (int r = 0; r < 2; ++r) {
            EXPECT_NEAR(runs[size_t(r)].loss, ref.loss, 1e-5 * std::abs(ref.loss)) << "rank " << r;
            test::expect_grad_shards(ref, runs[size_t(r)], r, 2);
        }
    }
}

TEST(Qwen2, TensorsAndCountAreQwen2s) {
    const ModelConfig c = model_preset("qwen2-0.5b");
    // Qwen/Qwen2-0.5B: 494,032,768 parameters as transformers counts them (tied head).
    EXPECT_EQ(num_parameters(c), 494032768);
    const ParamLayout l = build_param_layout(c);
    EXPECT_EQ(l.find("layers.3.self_attn.k_proj.bias").shape, (std::vector<int64_t>{128}));
    EXPECT_EQ(family_of(c).hf_tensor(c, l.find("layers.3.self_attn.q_proj.bias")).name,
              "model.layers.3.self_attn.q_proj.bias");
    EXPECT_THROW(l.find("layers.3.self_attn.o_proj.bias"), Error);
}

TEST(Qwen2, HuggingFaceConfigRoundTripsAndRefusesSlidingWindow) {
    test::TempDir tmp("weft_qwen2");
    for (const char* name : {"qwen2-tiny", "qwen2-0.5b"}) {
        const ModelConfig c = model_preset(name);
        family_of(c).write_hf_config(tmp.path, c);
        EXPECT_EQ(read_hf_model_config(tmp.path), c) << name;
    }
    std::ifstream in(tmp.path / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    for (const char* key : {"\"model_type\": \"qwen2\"", "\"Qwen2ForCausalLM\"",
                            "\"tie_word_embeddings\": true", "\"rope_theta\": 1000000.0"})
        EXPECT_NE(text.find(key), std::string::npos) << key;
    const std::string off = "\"use_sliding_window\": false";
    text.replace(text.find(off), off.size(), "\"use_sliding_window\": true");
    std::ofstream(tmp.path / "config.json") << text;
    EXPECT_NE(error_of([&] { read_hf_model_config(tmp.path); })
                  .find("\"use_sliding_window\" is true, expected false (weft's attention has no "
                        "sliding window)"),
              std::string::npos)
        << error_of([&] { read_hf_model_config(tmp.path); });
}
