// One mixture-of-experts layer under expert parallelism against the same layer with every
// expert on one rank: each rank routes its own tokens, ep rank r holds experts
// [r E/ep, (r+1) E/ep), and the rows travel through GroupExpertComm over the mesh's ep group.
// Outputs and input gradients must match each rank's own single-rank run, the router gradient
// too, and the local experts' gradients the single-rank ones summed over the ep group (1e-5
// relative to the largest value). The ep group's accounting: one all_to_all of the counts and two
// all_to_all_v of rows in forward, two in backward, with the bytes the routing implies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/philox.hpp"
#include "weft/model/moe_block.hpp"
#include "weft/parallel/expert_comm.hpp"

using namespace weft;

namespace {

model::ModelConfig layer_config() {
    model::ModelConfig c = model::model_preset("moe-tiny");
    c.n_embd = 32;
    c.n_inner = 24;
    c.n_experts = 4;
    c.experts_per_token = 2;
    c.moe_aux_loss_coef = 0;  // the losses' gradients are the dp path's (moe_train.sh)
    c.moe_z_loss_coef = 0;
    return c;
}

std::vector<float> random(int64_t n, uint64_t seed, const char* name, float std) {
    const Philox rng = philox_for(seed, name);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std * rng.normal(uint64_t(i));
    return v;
}

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::fabs(x)));
    return m;
}

// |a - b| within 1e-5 of b's largest magnitude, elementwise over n values.
void expect_close(const float* a, const float* b, int64_t n, const char* what) {
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(b[i])));
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    EXPECT_LE(worst, 1e-5 * scale) << what << ": largest difference " << worst << " of " << scale;
}

struct Weights {
    std::vector<float> router, w1, w2, w3;
    Weights(int64_t E, int64_t F, int64_t C, bool random_init)
        : router(random_init ? random(E * C, 1, "router", 0.3f) : std::vector<float>(E * C)),
          w1(random_init ? random(E * F * C, 1, "w1", 0.2f) : std::vector<float>(E * F * C)),
          w2(random_init ? random(E * C * F, 1, "w2", 0.2f) : std::vector<float>(E * C * F)),
          w3(random_init ? random(E * F * C, 1, "w3", 0.2f) : std::vector<float>(E * F * C)) {}
    // The view of experts [e0, ...): what a rank holding them passes as its expert tensors.
    model::MoeWeights view(int64_t e0, int64_t F, int64_t C) {
        return {router.data(), w1.data() + e0 * F * C, w2.data() + e0 * C * F,
                w3.data() + e0 * F * C};
    }
};

void run_layer(int ep) {
    Layout l;
    l.ep = ep;
    comm::Mesh mesh(l);
    comm::Group& group = mesh.group(comm::Axis::ep);
    ASSERT_EQ(group.size(), ep);
    const model::ModelConfig cfg = layer_config();
    const int64_t E = cfg.n_experts, F = cfg.ffn(), C = cfg.n_embd;
    const int64_t N = 16 + 3 * mesh.world_rank();  // uneven token counts across ranks
    const int64_t EL = E / ep, e0 = group.rank() * EL;
    const std::vector<float> x = random(N * C, 10 + uint64_t(mesh.world_rank()), "x", 1.0f);
    const std::vector<float> dout = random(N * C, 20 + uint64_t(mesh.world_rank()), "dout", 1.0f);

    // Every expert here: the reference for this rank's tokens.
    Weights p(E, F, C, true), g_ref(E, F, C, false);
    std::vector<float> out_ref(size_t(N * C)), dx_ref(size_t(N * C));
    std::vector<double> counts;
    {
        model::MoeMlp ref(cfg);
        model::MoeLayerActs a(cfg, N);
        ref.forward(a, counts, out_ref.data(), x.data(), nullptr, p.view(0, F, C), N, 0, false,
                    nullptr, nullptr, 0);
        ref.backward(dx_ref.data(), dout.data(), x.data(), a, counts, p.view(0, F, C),
                     g_ref.view(0, F, C), N, 0);
    }

    // This rank's experts only; the rest over the ep group.
    parallel::GroupExpertComm ec(group);
    Weights g(E, F, C, false);
    std::vector<float> out(size_t(N * C)), dx(size_t(N * C));
    model::MoeMlp layer(cfg);
    layer.set_expert_comm(&ec);
    model::MoeLayerActs a(cfg, N);
    mesh.reset_stats();
    layer.forward(a, counts, out.data(), x.data(), nullptr, p.view(e0, F, C), N, 0, false, nullptr,
                  nullptr, 0);
    const comm::OpStats fwd = group.stats()[comm::Op::all_to_all];
    layer.backward(dx.data(), dout.data(), x.data(), a, counts, p.view(e0, F, C), g.view(e0, F, C),
                   N, 0);
    const comm::OpStats both = group.stats()[comm::Op::all_to_all];

    expect_close(out.data(), out_ref.data(), N * C, "output");
    expect_close(dx.data(), dx_ref.data(), N * C, "input gradient");
    expect_close(g.router.data(), g_ref.router.data(), E * C, "router gradient");
    for (auto [mine, whole, block, name] :
         {std::tuple{&g.w1, &g_ref.w1, F * C, "w1"}, std::tuple{&g.w2, &g_ref.w2, C * F, "w2"},
          std::tuple{&g.w3, &g_ref.w3, F * C, "w3"}}) {
        comm::all_reduce(group, std::span<float>(*whole));  // every rank's tokens' share
        expect_close(mine->data() + e0 * block, whole->data() + e0 * block, EL * block, name);
        EXPECT_GT(max_abs(*mine), 0) << name;
    }

    // The wire: counts (E int64) once, then the rows each way; bytes are what a rank passes.
    if (ep == 1) return;  // a group of one moves nothing
    int64_t own = 0, received = 0, own_away = 0, received_away = 0;
    for (int j = 0; j < ep; ++j)
        for (int64_t le = 0; le < EL; ++le) {
            const int64_t s = a.ep_send[size_t(j * EL + le)], r = a.ep_recv[size_t(j * EL + le)];
            own += s, received += r;
            if (j != group.rank()) own_away += s, received_away += r;
        }
    EXPECT_EQ(own, a.plan.rows());
    const uint64_t row = uint64_t(C) * sizeof(float);
    EXPECT_EQ(fwd.calls, 3u);
    EXPECT_EQ(fwd.bytes, uint64_t(E) * 8 + uint64_t(own + received) * row);
    EXPECT_EQ(both.calls, 5u);
    EXPECT_EQ(both.bytes, uint64_t(E) * 8 + 2 * uint64_t(own + received) * row);
    const double counts_away = double((E - EL) * 8);
    EXPECT_EQ(both.bus_bytes, counts_away + 2.0 * double((own_away + received_away) * row));
}

}  // namespace

TEST(MoeExpertParallel, LayerMatchesEveryExpertOnOneRank) {
    run_layer(comm::world_size());
}

TEST(MoeExpertParallel, EpTwoFoldedOverFourDpRanks) {
    if (comm::world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    run_layer(2);
}
