// GPT-2's activations under --dtype bf16: ln1, ln2 and fch_gelu stored as bf16 change no bit of
// the losses or gradients of the run that keeps them in fp32 (the products round them to
// nearest even either way), and the activation sizes equal the analytic count in both dtypes.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "support/model_run.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/bf16_scratch.hpp"
#include "weft/model/gpt2.hpp"

using namespace weft;
using namespace weft::model;

namespace {

using test::fill_tokens;

ModelConfig small_config() {
    ModelConfig c;
    c.vocab_size = 97;
    c.n_positions = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.vocab_multiple = 128;
    return c;
}

struct Trace {
    std::vector<double> losses;
    std::vector<float> grads;  // of the last step
};

// Three SGD steps of one micro-batch, the activations stored as `span` says.
Trace train(const ModelConfig& c, LayerSpan span) {
    Gpt2 model(c);
    Buffer params(model.layout().total), grads(model.layout().total);
    init_params(params.data(), model.layout(), 5);
    Gpt2Activations a(c, 2, 16, span);
    fill_tokens(a, c.vocab_size, 3);
    Trace t;
    for (int step = 0; step < 3; ++step) {
        grads.zero();
        FlatAccess w(model.layout(), params.data(), grads.data());
        const float scale = 1.0f / float(a.B * a.T);
        t.losses.push_back(model.forward(a, w, true, scale) * scale);
        model.backward(a, w);
        for (int64_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grads[i];
    }
    t.grads.assign(grads.data(), grads.data() + grads.size());
    return t;
}

bool same_bits(double x, double y) {
    return std::memcmp(&x, &y, sizeof x) == 0;
}

}  // namespace

// The buffers are read only as operands of bf16 products, which round them to nearest even on
// every read; storing them rounded must therefore give every bit of the fp32-stored run.
TEST(Gpt2Bf16, KeptBf16ActivationsChangeNoBit) {
    const kernels::MatmulPrecisionScope bf16(kernels::MatmulPrecision::bf16);
    const ModelConfig c = small_config();
    for (bool recompute : {false, true}) {
        LayerSpan fp32_span, bf16_span;
        fp32_span.recompute = bf16_span.recompute = recompute;
        bf16_span.bf16 = true;
        const Trace kept32 = train(c, fp32_span), kept16 = train(c, bf16_span);
        for (size_t i = 0; i < kept32.losses.size(); ++i)
            EXPECT_TRUE(same_bits(kept32.losses[i], kept16.losses[i]))
                << "recompute " << recompute << " step " << i << ": " << kept32.losses[i] << " vs "
                << kept16.losses[i];
        ASSERT_EQ(kept32.grads.size(), kept16.grads.size());
        size_t differ = 0;
        for (size_t i = 0; i < kept32.grads.size(); ++i)
            differ += std::memcmp(&kept32.grads[i], &kept16.grads[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "gradient elements differing, recompute " << recompute;
    }
}

TEST(Gpt2Bf16, Bf16ActivationsNeedBf16Products) {
    const ModelConfig c = small_config();
    LayerSpan span;
    span.bf16 = true;
    Gpt2 model(c);
    Buffer params(model.layout().total), grads(model.layout().total);
    init_params(params.data(), model.layout(), 5);
    Gpt2Activations a(c, 1, 8, span);
    fill_tokens(a, c.vocab_size, 3);
    FlatAccess w(model.layout(), params.data(), grads.data());
    EXPECT_THROW(model.forward(a, w, false, 1.0f), Error);
}

// Bytes per kept layer, analytically (tp = 1, B*T = N tokens): qkv 3C, atty C, resid2 C, fch 4C,
// four LayerNorm statistics and NH log-sum-exps per token in fp32; ln1, ln2 (C each) and
// fch_gelu (4C) in fp32 or bf16.
TEST(Gpt2Bf16, ActivationBytesPerLayerAreTheAnalyticCount) {
    ModelConfig c = small_config();
    c.n_layer = 3;
    const int64_t B = 2, T = 16, N = B * T, C = c.n_embd, NH = c.n_head;
    for (bool bf16 : {false, true}) {
        const int64_t kept_bytes = bf16 ? 2 : 4;
        const int64_t per_layer = 4 * (9 * C + 4 + NH) * N + kept_bytes * 6 * C * N;
        LayerSpan one, two;
        one.count = 1, two.count = 2;
        one.head = two.head = false;
        one.bf16 = two.bf16 = bf16;
        const int64_t layer_bytes =
            4 * (Gpt2Activations::floats(c, B, T, two) - Gpt2Activations::floats(c, B, T, one));
        // A layer more also keeps one more layer input in the residual stream (C per token).
        EXPECT_EQ(layer_bytes, per_layer + 4 * C * N) << "bf16 " << bf16;
        // What the constructor allocates for the layers' buffers is that count too.
        Gpt2Activations a(c, B, T, two);
        const int64_t allocated = a.ln1.bytes() + a.ln2.bytes() + a.fch_gelu.bytes() +
                                  a.ln1_mean.bytes() + a.ln1_rstd.bytes() + a.ln2_mean.bytes() +
                                  a.ln2_rstd.bytes() + a.qkv.bytes() + a.atty.bytes() +
                                  a.lse.bytes() + a.resid2.bytes() + a.fch.bytes();
        EXPECT_EQ(allocated, 2 * per_layer) << "bf16 " << bf16;
    }
    // GPT-2 124M at B = 4, T = 1024: the lossless tier saves 2·6C bytes per token and layer
    // (docs/performance.md: 2·(12·6)·768·4096 bytes, with lnf kept fp32).
    const ModelConfig g = model_preset("gpt2");
    LayerSpan s32, s16;
    s16.bf16 = true;
    EXPECT_EQ(
        4 * (Gpt2Activations::floats(g, 4, 1024, s32) - Gpt2Activations::floats(g, 4, 1024, s16)),
        2 * 12 * 6 * 768 * 4096LL);
}

// The estimate's bf16 operand scratch (model/bf16_scratch.hpp, from the family's linear layers
// and the classifier's products) against what the product buffers of a thread that ran a
// training step really hold (kernels::matmul_bf16_scratch_bytes). A fresh thread, so that no
// earlier test's products have grown its buffers; with and without recomputation (the same
// products), two micro-batch shapes (the classifier's chunk is then the whole batch).
TEST(Gpt2Bf16, OperandScratchEstimateIsWhatTheProductsHold) {
    const kernels::MatmulPrecisionScope bf16(kernels::MatmulPrecision::bf16);
    ModelConfig c = small_config();
    c.vocab_size = 1000;  // so that the classifier's operands are the largest, as in GPT-2
    for (const int64_t T : {8, 16}) {
        int64_t held = -1;
        std::thread run([&] {
            Gpt2 model(c);
            Buffer params(model.layout().total), grads(model.layout().total);
            init_params(params.data(), model.layout(), 5);
            Gpt2Activations a(c, 2, T, model.activation_span());
            fill_tokens(a, c.vocab_size, 3);
            FlatAccess w(model.layout(), params.data(), grads.data());
            model.forward(a, w, true, 1.0f);
            model.backward(a, w);
            held = kernels::matmul_bf16_scratch_bytes();
        });
        run.join();
        const bool emulated = !kernels::bf16_products_native();
        EXPECT_EQ(bf16_operand_scratch_bytes(c, 2, T, 1, true, emulated), held) << "T " << T;
        // Without the head only the blocks' products remain, smaller with this vocabulary.
        EXPECT_LT(bf16_operand_scratch_bytes(c, 2, T, 1, false, emulated), held);
    }
}
