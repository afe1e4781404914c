// GPT-2's activations under --dtype bf16: stored as bf16 (ln1, ln2, fch_gelu losslessly; qkv,
// atty and fch through the bf16 attention kernel and rounding), training tracks the run that
// keeps them in fp32 within a stated tolerance, recomputation reproduces the stored run bit for
// bit, and the activation sizes equal the analytic count in both dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "support/model_run.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
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

using Trace = test::SgdTrace;

// Three SGD steps (lr 0.5) of one micro-batch, the activations stored as `span` says.
Trace train(const ModelConfig& c, LayerSpan span) {
    test::ModelRun<Gpt2> run(c);
    Gpt2Activations a(c, 2, 16, span);
    fill_tokens(a, c.vocab_size, 3);
    return test::sgd_trace(run, a, 3, 0.5f);
}

bool same_bits(double x, double y) {
    return std::memcmp(&x, &y, sizeof x) == 0;
}

}  // namespace

// Both runs under bf16 products; the only difference is where the activations are kept. Rounding
// q, k, v, the attention output, fch and the attention's output gradient to bf16 (8 significant
// bits, a relative error up to 2^-9 each) moves the losses by ~1e-4 here and the gradients by
// ~1e-3 relative (measured: 6.7e-5 and 1.8e-3); the bounds leave 10x room or more. The runs must
// differ: if the bf16 buffers were not used (or not rounded), they would be equal.
TEST(Gpt2Bf16, Bf16ActivationsTrackFp32Activations) {
    const kernels::MatmulPrecisionScope bf16(kernels::MatmulPrecision::bf16);
    const ModelConfig c = small_config();
    LayerSpan fp32_span, bf16_span, bf16_recompute;
    bf16_span.bf16 = bf16_recompute.bf16 = true;
    bf16_recompute.recompute = true;
    const Trace kept32 = train(c, fp32_span), kept16 = train(c, bf16_span);
    double max_loss_diff = 0;
    for (size_t i = 0; i < kept32.losses.size(); ++i)
        max_loss_diff = std::max(max_loss_diff, std::abs(kept32.losses[i] - kept16.losses[i]));
    const double grad_diff = test::rel_l2(kept16.grads, kept32.grads);
    EXPECT_LT(max_loss_diff, 2e-3) << "loss " << kept32.losses.back();
    EXPECT_LT(grad_diff, 2e-2);
    EXPECT_GT(grad_diff, 0.0) << "bf16 activations changed nothing";
    std::printf("bf16 vs fp32 activations: max |loss diff| %.3g, gradient relative L2 %.3g\n",
                max_loss_diff, grad_diff);

    // Recomputation re-runs the same forward into the same kind of buffers.
    const Trace recomputed = train(c, bf16_recompute);
    for (size_t i = 0; i < kept16.losses.size(); ++i)
        EXPECT_TRUE(same_bits(kept16.losses[i], recomputed.losses[i])) << "step " << i;
    size_t differ = 0;
    for (size_t i = 0; i < kept16.grads.size(); ++i)
        differ += std::memcmp(&kept16.grads[i], &recomputed.grads[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "gradient elements differing under recomputation";
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

// Bytes per kept layer, analytically (tp = 1, B*T = N tokens): resid2 C, four LayerNorm
// statistics and NH log-sum-exps per token in fp32; ln1, ln2 (C each), fch, fch_gelu (4C each),
// qkv 3C and atty C in fp32 or bf16. Context parallelism keeps the same buffers (every cp region
// runs on the kept q, k, v and output).
TEST(Gpt2Bf16, ActivationBytesPerLayerAreTheAnalyticCount) {
    ModelConfig c = small_config();
    c.n_layer = 3;
    const int64_t B = 2, T = 16, N = B * T, C = c.n_embd, NH = c.n_head;
    for (bool bf16 : {false, true}) {
        const int64_t kept_bytes = bf16 ? 2 : 4, attn_bytes = bf16 ? 2 : 4;
        const int64_t per_layer =
            4 * (C + 4 + NH) * N + kept_bytes * 10 * C * N + attn_bytes * 4 * C * N;
        const int64_t layer_bytes = test::one_block_bytes<Gpt2Activations>(c, B, T, bf16);
        // A layer more also keeps one more layer input in the residual stream (C per token).
        EXPECT_EQ(layer_bytes, per_layer + 4 * C * N) << "bf16 " << bf16;
        // What the constructor allocates for the layers' buffers is that count too.
        Gpt2Activations a(c, B, T, test::blocks_span(2, bf16));
        const int64_t allocated = a.ln1.bytes() + a.ln2.bytes() + a.fch_gelu.bytes() +
                                  a.ln1_mean.bytes() + a.ln1_rstd.bytes() + a.ln2_mean.bytes() +
                                  a.ln2_rstd.bytes() + a.qkv.bytes() + a.atty.bytes() +
                                  a.lse.bytes() + a.resid2.bytes() + a.fch.bytes();
        EXPECT_EQ(allocated, 2 * per_layer) << "bf16 " << bf16;
    }
    // GPT-2 124M at B = 4, T = 1024: bf16 saves 2·14C bytes per token and layer
    // (docs/performance.md: 2·(12·14)·768·4096 bytes, with lnf and the residual stream fp32).
    const ModelConfig g = model_preset("gpt2");
    LayerSpan s32, s16;
    s16.bf16 = true;
    EXPECT_EQ(
        4 * (Gpt2Activations::floats(g, 4, 1024, s32) - Gpt2Activations::floats(g, 4, 1024, s16)),
        2 * 12 * 14 * 768 * 4096LL);
}

// The estimate's bf16 operand scratch (model/bf16_scratch.hpp, from the family's linear layers
// and the classifier's products) against what the product buffers of a thread that ran a
// training step really hold (kernels::matmul_bf16_scratch_bytes), and likewise the bf16
// attention kernel's copies of a sequence (kernels::attention_bf16_scratch_bytes). A fresh thread,
// so that no earlier test's products have grown its buffers; with and without recomputation (the
// same products), two micro-batch shapes (the classifier's chunk is then the whole batch).
TEST(Gpt2Bf16, OperandScratchEstimateIsWhatTheProductsHold) {
    const kernels::MatmulPrecisionScope bf16(kernels::MatmulPrecision::bf16);
    ModelConfig c = small_config();
    c.vocab_size = 1000;  // so that the classifier's operands are the largest, as in GPT-2
    for (const int64_t T : {8, 16}) {
        int64_t held = -1, attention_held = -1;
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
            attention_held = kernels::attention_bf16_scratch_bytes();
        });
        run.join();
        EXPECT_EQ(bf16_attention_scratch_bytes(c, T, 1), attention_held) << "T " << T;
        const bool emulated = !kernels::bf16_products_native();
        EXPECT_EQ(bf16_operand_scratch_bytes(c, 2, T, 1, true, emulated), held) << "T " << T;
        // Without the head only the blocks' products remain, smaller with this vocabulary.
        EXPECT_LT(bf16_operand_scratch_bytes(c, 2, T, 1, false, emulated), held);
    }
}
