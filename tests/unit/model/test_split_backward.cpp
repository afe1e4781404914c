// The zero-bubble schedules' split backward (Model::block_backward_input, then
// block_backward_weight): every family's gradients bit for bit those of the fused backward, in
// fp32 and bf16, with two micro-batches accumulating and every W run after every B (the furthest
// a schedule moves them apart).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/family_cases.hpp"
#include "support/model_run.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/family.hpp"
#include "weft/model/model.hpp"

using namespace weft;
using namespace weft::model;

namespace {

// Gradients of two micro-batches, fused or split (all B's, then all W's, m0 before m1).
std::vector<float> gradients(const ModelConfig& c, bool split) {
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
    if (split)
        for (auto& a : acts)
            for (int l = L - 1; l >= 0; --l) m->block_backward_weight(*a, w, l);
    return std::vector<float>(grads.data(), grads.data() + grads.size());
}

class SplitBackward : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(SplitBackward, GradientsEqualTheFusedBackwardsBitForBit) {
    const auto [preset, bf16] = GetParam();
    kernels::MatmulPrecisionScope precision(bf16 ? kernels::MatmulPrecision::bf16
                                                 : kernels::MatmulPrecision::fp32);
    const ModelConfig c = test::small_family_config(preset, 97, 16, 3);
    const std::vector<float> fused = gradients(c, false), split = gradients(c, true);
    ASSERT_EQ(fused.size(), split.size());
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < fused.size(); ++i) {
        differ += std::memcmp(&fused[i], &split[i], sizeof(float)) != 0;
        nonzero += fused[i] != 0;
    }
    EXPECT_EQ(differ, 0u) << preset << (bf16 ? " bf16" : " fp32");
    EXPECT_GT(nonzero, fused.size() / 2);  // the comparison saw real gradients
}

INSTANTIATE_TEST_SUITE_P(Families, SplitBackward,
                         ::testing::Combine(test::family_presets(), ::testing::Bool()),
                         test::family_case_name);

}  // namespace
