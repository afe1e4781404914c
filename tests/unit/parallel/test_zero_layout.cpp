// ZeRO's layout under expert parallelism, without MPI: with the expert runs aligned as the
// trainer builds them (ModelShard::expert_align), each unit splits into parts of one kind; the
// dp ranks' slices of a dense part, and the edp ranks' slices of an expert part (per ep rank),
// cover it exactly once; the shard is dense parts / dp plus expert parts / edp, and the model
// state bytes (zero_state_bytes) count exactly that.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {
namespace {

model::ModelConfig moe(int64_t shared) {
    model::ModelConfig cfg = model::model_preset("moe-tiny");
    cfg.vocab_size = 1000;
    cfg.n_shared_experts = shared;  // a dense run after the experts: three parts per block
    return cfg;
}

model::ParamLayout layout(const model::ModelConfig& cfg, int dp, int ep, int ep_rank) {
    model::ModelShard shard;
    shard.ep = ep;
    shard.ep_rank = ep_rank;
    shard.expert_align = zero_expert_align(dp);
    return model::build_param_layout(cfg, shard);
}

TEST(ZeroLayoutEp, PartsSplitOverTheirGroupsOnce) {
    for (int64_t shared : {0, 1})
        for (auto [dp, ep] : {std::pair{4, 2}, {4, 4}, {2, 2}, {6, 2}}) {
            const model::ModelConfig cfg = moe(shared);
            const std::string what = "dp " + std::to_string(dp) + " ep " + std::to_string(ep) +
                                     " shared " + std::to_string(shared);
            // Per ep rank: how often each float of the padded buffer is in some rank's slice.
            std::vector<std::vector<int>> seen{size_t(ep)};
            for (int r = 0; r < dp; ++r) {
                const ZeroLayout z(layout(cfg, dp, ep, r % ep), dp, r);
                ASSERT_EQ(z.ep(), ep) << what;
                const model::ParamLayout& p = z.padded();
                for (int e = 0; e < ep; ++e) seen[size_t(e)].resize(size_t(p.total));
                int64_t dense = 0, expert = 0, shard = 0;
                for (const ShardSlice& s : z.slices()) {
                    const int64_t part = s.size * z.group_size(s);
                    (s.expert ? expert : dense) += part;
                    shard += s.size;
                    EXPECT_EQ(s.size % 16, 0) << what;
                    EXPECT_EQ(z.group_rank(s), s.expert ? r / ep : r) << what;
                    EXPECT_EQ(s.begin, z.slice_begin(s, z.group_rank(s))) << what;
                    // A dense slice is every ep rank's; an expert slice only this one's.
                    for (int e = 0; e < ep; ++e) {
                        if (s.expert && e != r % ep) continue;
                        for (int64_t i = s.begin; i < s.begin + s.size; ++i)
                            ++seen[size_t(e)][size_t(i)];
                    }
                    // Each tensor of the slice's unit lies in a part of its kind or outside it.
                    for (const model::ParamSpec& t : p.tensors) {
                        if (t.unit != s.unit || t.expert == s.expert) continue;
                        EXPECT_TRUE(t.offset + t.numel_stored <= s.part_begin ||
                                    t.offset >= s.part_begin + part)
                            << what << ": " << t.name << " in a part of the other kind";
                    }
                }
                EXPECT_EQ(dense + expert, p.total) << what;
                EXPECT_GT(expert, 0) << what;
                EXPECT_EQ(shard, dense / dp + expert / (dp / ep)) << what;
                EXPECT_EQ(z.shard_floats(), shard) << what;
                // The one count the trainer's estimate and the planner read.
                const int64_t f = sizeof(float);
                EXPECT_EQ(zero_state_bytes(z, 1).optimizer, 2 * shard * f) << what;
                EXPECT_EQ(zero_state_bytes(z, 2).grads, shard * f) << what;
                EXPECT_EQ(zero_state_bytes(z, 3).params, shard * f) << what;
                EXPECT_EQ(zero_state_bytes(z, 0).params, p.total * f) << what;
            }
            for (int e = 0; e < ep; ++e)
                for (size_t i = 0; i < seen[size_t(e)].size(); ++i)
                    ASSERT_EQ(seen[size_t(e)][i], 1) << what << ": ep rank " << e << " float " << i;
        }
}

TEST(ZeroLayoutEp, WithoutEpOneSlicePerUnit) {
    const model::ModelConfig cfg = moe(0);
    const ZeroLayout z(model::build_param_layout(cfg), 4, 1);
    ASSERT_EQ(int(z.slices().size()), z.units());
    for (int u = 0; u < z.units(); ++u) {
        const ShardSlice& s = z.slices()[size_t(z.first_slice(u))];
        EXPECT_FALSE(s.expert);
        EXPECT_EQ(s.size, z.padded().units[size_t(u)].size / 4);
        EXPECT_EQ(s.begin, z.padded().units[size_t(u)].offset + s.size);
    }
    EXPECT_EQ(z.shard_floats(), z.padded().total / 4);
}

TEST(ZeroLayoutEp, UnalignedExpertRunIsAnError) {
    model::ModelShard shard;
    shard.ep = 2;  // expert_align left at 16
    const model::ParamLayout l = model::build_param_layout(moe(0), shard);
    const model::ParamSpec& w1 = l.find("layers.0.block_sparse_moe.experts.w1.weight");
    // A dp whose slice boundaries the expert run does not start on.
    const int64_t begin = w1.offset - l.units[size_t(w1.unit)].offset;
    int dp = 2;
    while (begin % zero_expert_align(dp) == 0) dp += 2;
    try {
        ZeroLayout z(l, dp, 0);
        FAIL() << "an unaligned expert run was accepted at dp " << dp;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ModelShard::expert_align"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace weft::parallel
