// The zero-bubble schedules' split backward (Model::block_backward_input, then
// block_backward_weight): every family's gradients bit for bit those of the fused backward, in
// fp32 and bf16, with two micro-batches accumulating and every W run after every B (the furthest
// a schedule moves them apart); and no block matrix's gradient computed in B (the MoE layer's
// router and experts included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/family_cases.hpp"
#include "support/model_run.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/family.hpp"
#include "weft/model/model.hpp"
#include "weft/model/params.hpp"

using namespace weft;
using namespace weft::model;

namespace {

struct Gradients {
    std::vector<float> final;
    // Split only: after every B, before any W. The block's matrices (every tensor of two or more
    // dimensions in a block's unit: products' weights, the MoE router and experts) are then
    // still untouched.
    std::vector<float> after_b;
};

// Gradients of two micro-batches, fused or split (all B's, then all W's, m0 before m1).
Gradients gradients(const ModelConfig& c, bool split) {
    std::unique_ptr<Model> m = make_model(c);
    Buffer params(m->layout().total), grads(m->layout().total);
    init_params(params.data(), m->layout(), 9);
    for (int64_t i = 0; i < params.size(); ++i) params[i] *= 4.0f;  // visible low bits
    FlatAccess w(m->layout(), params.data(), grads.data());
    const int64_t B = 2, T = 8;
    std::vector<std::unique_ptr<Activations>> acts;
    for (int micro = 0; micro < 2; ++micro) {
        acts.push_back(m->new_activations(B, T, LayerSpan{}));
        test::fill_tokens(*acts.back(), c.vocab_size, 3 + micro);
        m->forward(*acts.back(), w, true, 1.0f / float(2 * B * T));
    }
    const int L = int(c.n_layer);
    for (auto& a : acts) {
        if (!split) {
            m->backward(*a, w);
            continue;
        }
        HoldGradsReady held(w);
        m->head_backward(*a, held);
        for (int l = L - 1; l >= 0; --l) m->block_backward_input(*a, w, l);
        m->embed_backward(*a, held);
    }
    Gradients out;
    if (split) {
        out.after_b.assign(grads.data(), grads.data() + grads.size());
        for (auto& a : acts)
            for (int l = L - 1; l >= 0; --l) m->block_backward_weight(*a, w, l);
    }
    out.final.assign(grads.data(), grads.data() + grads.size());
    return out;
}

// The split is bit for bit the fused backward, and B left every block matrix to the W.
void expect_split_equals_fused(const ModelConfig& c, const std::string& what) {
    const std::vector<float> fused = gradients(c, false).final;
    const Gradients split = gradients(c, true);
    ASSERT_EQ(fused.size(), split.final.size());
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < fused.size(); ++i) {
        differ += std::memcmp(&fused[i], &split.final[i], sizeof(float)) != 0;
        nonzero += fused[i] != 0;
    }
    EXPECT_EQ(differ, 0u) << what;
    EXPECT_GT(nonzero, fused.size() / 2);  // the comparison saw real gradients
    const ParamLayout layout = make_model(c)->layout();
    int matrices = 0;
    for (const ParamSpec& t : layout.tensors) {
        if (t.unit < 1 || t.unit > int(c.n_layer) || t.shape.size() < 2) continue;
        ++matrices;
        int64_t early = 0;
        for (int64_t i = t.offset; i < t.offset + t.numel_stored; ++i)
            early += split.after_b[size_t(i)] != 0;
        EXPECT_EQ(early, 0) << what << ": " << t.name << " has gradients before its W";
    }
    EXPECT_GT(matrices, 0);
}

class SplitBackward : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(SplitBackward, GradientsEqualTheFusedBackwardsBitForBit) {
    const auto [preset, bf16] = GetParam();
    kernels::MatmulPrecisionScope precision(bf16 ? kernels::MatmulPrecision::bf16
                                                 : kernels::MatmulPrecision::fp32);
    expect_split_equals_fused(test::small_family_config(preset, 97, 16, 3),
                              preset + (bf16 ? " bf16" : " fp32"));
}

// The MoE layer's shared experts (DeepSeek's, Qwen-MoE's) queue their W with the routed ones.
TEST(SplitBackward, MoeSharedExpertsWaitForTheW) {
    ModelConfig c = test::small_family_config("moe-tiny", 97, 16, 2);
    c.n_shared_experts = 1;
    for (bool bf16 : {false, true}) {
        kernels::MatmulPrecisionScope precision(bf16 ? kernels::MatmulPrecision::bf16
                                                     : kernels::MatmulPrecision::fp32);
        expect_split_equals_fused(
            c, bf16 ? "moe-tiny, a shared expert, bf16" : "moe-tiny, a shared expert, fp32");
    }
}

// A frozen model's B (PPD's prompt tokens train through it): the input gradients B's, bit for
// bit, and nothing kept for a W that never runs, where B's queue holds the output gradients.
TEST_P(SplitBackward, FrozenBackwardKeepsNoWeightGradients) {
    const auto [preset, bf16] = GetParam();
    kernels::MatmulPrecisionScope precision(bf16 ? kernels::MatmulPrecision::bf16
                                                 : kernels::MatmulPrecision::fp32);
    const ModelConfig c = test::small_family_config(preset, 97, 16, 3);
    std::unique_ptr<Model> m = make_model(c);
    Buffer params(m->layout().total), grads(m->layout().total);
    init_params(params.data(), m->layout(), 9);
    FlatAccess w(m->layout(), params.data(), grads.data());
    const int64_t B = 2, T = 8, C = c.n_embd;
    const int L = int(c.n_layer);
    std::vector<float> dinput[2];
    int64_t queued[2] = {0, 0};
    for (int frozen = 0; frozen < 2; ++frozen) {
        std::unique_ptr<Activations> a = m->new_activations(B, T, LayerSpan{});
        test::fill_tokens(*a, c.vocab_size, 3);
        m->forward(*a, w, true, 1.0f / float(B * T));
        HoldGradsReady held(w);
        m->head_backward(*a, held);
        for (int l = L - 1; l >= 0; --l) {
            if (frozen)
                m->block_backward_frozen(*a, w, l);
            else
                m->block_backward_input(*a, w, l);
        }
        for (const WeightGradQueue& q : a->weight_grads) queued[frozen] += q.allocated_floats();
        const float* d = m->dresid(B, T);
        dinput[frozen].assign(d, d + B * T * C);
    }
    EXPECT_EQ(std::memcmp(dinput[0].data(), dinput[1].data(), dinput[0].size() * sizeof(float)), 0);
    EXPECT_NE(std::count(dinput[1].begin(), dinput[1].end(), 0.0f), int64_t(dinput[1].size()));
    EXPECT_GT(queued[0], 0);  // B alone keeps the output gradients for its W
    EXPECT_EQ(queued[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Families, SplitBackward,
                         ::testing::Combine(test::family_presets(), ::testing::Bool()),
                         test::family_case_name);

}  // namespace
