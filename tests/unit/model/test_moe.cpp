// The mixture-of-experts Llama, whole-model: backward (LM loss plus the router's load-balance
// and z-losses) against finite differences, dropless outputs independent of the batch a token
// shares, recomputation giving the same gradients, the parameter and activation counts, and the
// configuration errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "support/check.hpp"
#include "support/model_run.hpp"
#include "weft/model/counts.hpp"
#include "weft/model/family.hpp"
#include "weft/model/llama.hpp"

using namespace weft;
using namespace weft::model;

namespace {

using test::fill_tokens;

ModelConfig moe_config(bool renormalize, double aux = 0.1, double z = 0.01, int64_t shared = 0) {
    ModelConfig c = model_preset("moe-tiny");
    c.vocab_size = 97;
    c.n_positions = 32;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 32;
    c.n_inner = 24;
    c.n_experts = 4;
    c.experts_per_token = 2;
    c.moe_renormalize = renormalize;
    c.moe_aux_loss_coef = aux;
    c.moe_z_loss_coef = z;
    c.n_shared_experts = shared;
    return c;
}

struct ModelRun : test::ModelRun<Llama> {
    using test::ModelRun<Llama>::ModelRun;
    // The training loss: mean LM loss plus the router losses of every layer.
    double step(Activations& a, bool backward) {
        FlatAccess w(model.layout(), params.data(), grads.data());
        const float scale = 1.0f / float(a.B * a.T);
        const double lm = model.forward(a, w, /*train=*/true, scale) * scale;
        if (backward) model.backward(a, w);
        const MoeStats s = model.take_moe_stats();
        return lm + s.aux_loss + s.z_loss;
    }
};

}  // namespace

class MoeGradient : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(MoeGradient, MatchesFiniteDifferences) {
    const auto [renormalize, shared] = GetParam();
    const ModelConfig c = moe_config(renormalize, 0.1, 0.01, shared);
    ModelRun run(c);
    for (int64_t i = 0; i < run.params.size(); ++i) run.params[i] *= 4.0f;
    LlamaActivations a(c, 2, 12);
    fill_tokens(a, c.vocab_size, 3);
    run.step(a, true);
    const std::vector<float> g(run.grads.data(), run.grads.data() + run.grads.size());

    std::vector<std::vector<int32_t>> routing;
    for (const MoeLayerActs& m : a.moe) routing.push_back(m.expert);

    // A step that moves a token to another expert makes the loss jump: such points are not
    // differentiable and are skipped (and counted).
    std::vector<float> p(run.params.data(), run.params.data() + run.params.size());
    bool rerouted = false;
    auto loss = [&] {
        std::copy(p.begin(), p.end(), run.params.data());
        const double l = run.step(a, false);
        for (size_t i = 0; i < a.moe.size(); ++i) rerouted |= a.moe[i].expert != routing[i];
        return l;
    };
    int checked = 0, nonzero = 0, skipped = 0;
    for (const ParamSpec& t : run.model.layout().tensors) {
        const int64_t n = t.numel_logical();
        const bool moe = t.name.find("block_sparse_moe") != std::string::npos;
        for (int k = 0; k < (moe ? 12 : 4); ++k) {
            int64_t e = (k * 7919 + 13) % n;
            if (t.name == "embed_tokens.weight") e = int64_t(a.inputs[size_t(k)]) * c.n_embd + k;
            const size_t i = size_t(t.offset + e);
            rerouted = false;
            const double fd = test::finite_difference(p, loss, {i}, 2e-3f)[0];
            if (rerouted) {
                ++skipped;
                continue;
            }
            EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::abs(fd)) << t.name << " element " << e;
            ++checked;
            nonzero += std::abs(fd) > 1e-4;
        }
    }
    EXPECT_LE(10 * skipped, checked + skipped)
        << skipped << " of " << checked + skipped << " steps changed the routing";
    EXPECT_GT(checked, 0);
    EXPECT_GT(nonzero, checked / 2) << "most checked gradients are zero: the test sees little";
}

INSTANTIATE_TEST_SUITE_P(Routing, MoeGradient,
                         ::testing::Values(std::make_tuple(true, 0), std::make_tuple(false, 0),
                                           std::make_tuple(true, 2)),
                         [](const auto& i) {
                             return std::string(std::get<0>(i.param) ? "renormalized" : "raw") +
                                    (std::get<1>(i.param) ? "_shared" : "");
                         });

TEST(Moe, RouterLossGradientsAreThere) {
    // The same point with and without the router losses: their gradients reach the router.
    ModelRun with(moe_config(true, 0.5, 0.05)), without(moe_config(true, 0, 0));
    const ModelConfig c = moe_config(true);
    LlamaActivations a(c, 2, 12), b(c, 2, 12);
    fill_tokens(a, c.vocab_size, 3);
    fill_tokens(b, c.vocab_size, 3);
    const double l1 = with.step(a, true), l0 = without.step(b, true);
    EXPECT_GT(l1, l0);
    const ParamSpec& router = with.model.layout().find("layers.0.block_sparse_moe.gate.weight");
    EXPECT_GT(test::max_abs_diff(with.grads.data() + router.offset,
                                 without.grads.data() + router.offset, size_t(router.numel_stored)),
              1e-6);
}

// The output of sequence 0 alone and sharing the micro-batch with sequence 1.
double batch_dependence(const ModelConfig& c) {
    ModelRun run(c);
    LlamaActivations two(c, 2, 16), one(c, 1, 16);
    fill_tokens(two, c.vocab_size, 9);
    std::copy_n(two.inputs.begin(), 16, one.inputs.begin());
    std::copy_n(two.targets.begin(), 16, one.targets.begin());
    FlatAccess w(run.model.layout(), run.params.data(), run.grads.data());
    run.model.forward(two, w, false, 1.0f);
    run.model.forward(one, w, false, 1.0f);
    const int L = int(c.n_layer);
    return test::max_rel_diff(two.resid_in(L), one.resid_in(L), size_t(16 * c.n_embd), 1e-3);
}

TEST(Moe, DroplessOutputDoesNotDependOnTheBatch) {
    // Per-expert products over other row counts may round differently; nothing else may differ.
    EXPECT_LT(batch_dependence(moe_config(true)), 1e-5);
    EXPECT_LT(batch_dependence(moe_config(false)), 1e-5);
    // With a tight capacity the tokens compete for slots: the check can see that.
    ModelConfig tight = moe_config(true);
    tight.moe_capacity_factor = 0.5;
    EXPECT_GT(batch_dependence(tight), 1e-3);
}

TEST(Moe, RecomputationGivesTheSameGradients) {
    const ModelConfig c = moe_config(true);
    ModelRun plain(c), rc(c);
    LlamaActivations a(c, 2, 12), b(c, 2, 12, LayerSpan{0, -1, true, true});
    fill_tokens(a, c.vocab_size, 4);
    fill_tokens(b, c.vocab_size, 4);
    EXPECT_EQ(plain.step(a, true), rc.step(b, true));
    EXPECT_EQ(test::max_abs_diff(plain.grads.data(), rc.grads.data(), size_t(plain.grads.size())),
              0.0);
}

TEST(Moe, ParameterCountsSplitTotalAndActive) {
    const ModelConfig c = model_preset("mixtral-8x7b");
    const int64_t C = c.n_embd, F = c.ffn(), E = c.n_experts, k = c.experts_per_token;
    const int64_t attn = C * c.n_head * c.head_dim() * 2 + 2 * C * c.kv_heads() * c.head_dim();
    const int64_t layer = attn + 2 * C + E * C + 3 * E * F * C;
    const int64_t total = 2 * c.vocab_size * C + c.n_layer * layer + C;
    EXPECT_EQ(num_parameters(c), total);
    EXPECT_EQ(active_parameters(c), total - c.n_layer * (E - k) * 3 * F * C);
    // Mixtral-8x7B as Mistral announced it: 46.7B total, 12.9B active.
    EXPECT_NEAR(double(num_parameters(c)) / 1e9, 46.7, 0.05);
    EXPECT_NEAR(double(active_parameters(c)) / 1e9, 12.9, 0.05);
    EXPECT_DOUBLE_EQ(train_flops_per_token(c, 1),
                     6.0 * double(active_parameters(c)) + 6.0 * double(c.n_layer * C));
    // Shared experts are active for every token.
    ModelConfig s = c;
    s.n_shared_experts = 2;
    EXPECT_EQ(num_parameters(s) - num_parameters(c), c.n_layer * 2 * 3 * F * C);
    EXPECT_EQ(active_parameters(s) - active_parameters(c), c.n_layer * 2 * 3 * F * C);
}

TEST(Moe, ActivationCountIsWhatIsAllocated) {
    for (bool rc : {false, true}) {
        const ModelConfig c = moe_config(true, 0.1, 0.01, rc ? 1 : 0);
        const LayerSpan span{0, -1, true, rc, 1, false};
        LlamaActivations a(c, 2, 16, span);
        int64_t n = 0;
        for (const Buffer* b : std::initializer_list<const Buffer*>{
                 &a.resid, &a.losses, &a.ln1, &a.rstd1, &a.qkv, &a.atty, &a.lse, &a.resid2, &a.ln2,
                 &a.rstd2, &a.gu, &a.act, &a.lnf, &a.lnf_rstd, &a.dlnf})
            n += b->size();
        n += int64_t(a.inputs.size() + a.targets.size());
        for (const MoeLayerActs& m : a.moe) {
            for (const Buffer* b :
                 {&m.probs, &m.lse, &m.weight, &m.gu, &m.act, &m.y, &m.shared_gu, &m.shared_act})
                n += b->size();
            n += int64_t(m.expert.size());
            // The plan, at its largest (dropless: every slot a row).
            n += 2 * int64_t(m.expert.size()) + 2 * (c.n_experts + 1);
        }
        for (const auto& counts : a.moe_counts) n += 2 * int64_t(counts.size());
        EXPECT_EQ(n, family_of(c).activation_floats(c, 2, 16, span)) << "recompute " << rc;
    }
}

TEST(Moe, ConfigErrorsNameTheValues) {
    ModelConfig c = moe_config(true);
    c.experts_per_token = 5;
    EXPECT_NE(test::error_of([&] {
                  c.validate("test");
              }).find("experts_per_token (top-k) is 5, expected between 1 and n_experts 4"),
              std::string::npos);
    c = moe_config(true);
    c.moe_capacity_factor = -1;
    EXPECT_NE(test::error_of([&] { c.validate("test"); }).find("moe_capacity_factor"),
              std::string::npos);
    c = model_preset("tiny");
    c.n_experts = 4;
    c.experts_per_token = 2;
    EXPECT_NE(test::error_of([&] { c.validate("test"); }).find("only the llama family"),
              std::string::npos);
}

// Under tp the MoE block runs replicated: tp rank 1 of 2 holds the router and every expert whole
// (attention split as usual), the same logical tensors as one process.
TEST(Moe, ExpertTensorsStayWholeUnderTp) {
    const ParamLayout whole = build_param_layout(moe_config(true));
    const ParamLayout tp2 = build_param_layout(moe_config(true), ModelShard{{}, 1, 2});
    int experts = 0;
    for (const ParamSpec& p : tp2.tensors) {
        if (p.name.find("block_sparse_moe") == std::string::npos) continue;
        const ParamSpec& w = whole.find(p.name);
        EXPECT_EQ(p.tp_dim, -1) << p.name;
        EXPECT_EQ(p.numel_stored, w.numel_stored) << p.name;
        experts += p.expert;
    }
    EXPECT_EQ(experts, 3 * 2);  // w1, w2, w3 of 2 layers
    EXPECT_LT(tp2.find("layers.0.self_attn.q_proj.weight").numel_stored,
              whole.find("layers.0.self_attn.q_proj.weight").numel_stored);
}

// Expert parallelism: ep rank r holds experts [r E/ep, (r+1) E/ep) of each expert tensor, a
// contiguous slice that starts at the logical element r E/ep x (F C); its initial values are the
// whole model's (initialisation by logical index), everything else is held whole.
TEST(Moe, ExpertTensorsSplitOverEp) {
    const ModelConfig c = moe_config(true);
    const ParamLayout whole = build_param_layout(c);
    Buffer all(whole.total);
    init_params(all.data(), whole, 7);
    const int ep = 2;
    for (int r = 0; r < ep; ++r) {
        const ParamLayout part = build_param_layout(c, ModelShard{{}, 0, 1, r, ep});
        Buffer mine(part.total);
        init_params(mine.data(), part, 7);
        int experts = 0;
        for (const ParamSpec& p : part.tensors) {
            const ParamSpec& w = whole.find(p.name);
            const bool expert = p.name.find(".experts.w") != std::string::npos;
            EXPECT_EQ(p.expert, expert) << p.name;
            const int64_t rows = expert ? w.rows_stored / ep : w.rows_stored;
            EXPECT_EQ(p.rows_stored, rows) << p.name;
            EXPECT_EQ(p.first_row, expert ? r * rows : 0) << p.name;
            experts += expert;
            // The slice is contiguous in the logical tensor and holds the whole model's values.
            const int64_t start = expert ? r * p.numel_stored : 0;
            for (int64_t i = 0; i < p.numel_stored; ++i) {
                // -1: a padding row of the vocabulary, in both layouts.
                const int64_t j = expert ? start + i : logical_index(w, 0, 1, i);
                ASSERT_EQ(logical_index(p, 0, 1, i), j) << p.name;
                ASSERT_EQ(mine.data()[p.offset + i], all.data()[w.offset + std::max(j, i)])
                    << p.name;
            }
        }
        EXPECT_EQ(experts, 3 * c.n_layer);
    }
    EXPECT_NE(test::error_of([&] {
                  build_param_layout(c, ModelShard{{}, 0, 1, 0, 3});
              }).find("4 experts do not split over expert-parallel degree 3"),
              std::string::npos);
}

// Aux-loss-free balancing: each expert's bias moves by the rate against its load's side of the
// mean (DeepSeek-V3's sign rule); one at the mean keeps its bias.
TEST(Moe, RouterBiasMovesAgainstTheLoad) {
    const double load[4] = {10, 30, 20, 20};  // mean 20
    std::vector<float> bias = {0.5f, 0.5f, 0.5f, -0.25f};
    moe_update_router_bias(bias.data(), load, 4, 0.125);
    EXPECT_EQ(bias, (std::vector<float>{0.625f, 0.375f, 0.5f, -0.25f}));
    // A balanced batch leaves every bias as it is.
    const double even[4] = {7, 7, 7, 7};
    moe_update_router_bias(bias.data(), even, 4, 0.125);
    EXPECT_EQ(bias, (std::vector<float>{0.625f, 0.375f, 0.5f, -0.25f}));
}
