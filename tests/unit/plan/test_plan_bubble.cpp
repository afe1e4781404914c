// The planner's pipeline time is the shared simulator's (parallel/pipeline), not a formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/plan/cost.hpp"

using namespace weft;
using namespace weft::plan;

TEST(PlanBubble, OneFOneBUniformCostsMatchesPaper) {
    for (int p : {2, 4, 8})
        for (int m : {1, 4, 8, 32}) {
            Layout l;
            l.pp = p, l.pp_schedule = ScheduleKind::one_f_one_b;
            pipeline::Costs costs;  // forward 1, backward 2, free messages
            auto [makespan, bubble] = simulate_pipeline(l, m, costs, nullptr);
            EXPECT_NEAR(bubble, double(p - 1) / (m + p - 1), 1e-12) << "p=" << p << " m=" << m;
            EXPECT_NEAR(makespan, 3.0 * (m + p - 1), 1e-9);
        }
}

TEST(PlanBubble, InterleavedMatchesPaper) {
    for (int v : {2, 4}) {
        Layout l;
        l.pp = 4, l.vpp = v, l.pp_schedule = ScheduleKind::interleaved;
        const pipeline::Costs costs = pipeline::stage_costs(v);
        auto [makespan, bubble] = simulate_pipeline(l, 8, costs, nullptr);
        EXPECT_NEAR(bubble, pipeline::ideal_bubble(pipeline::ScheduleKind::interleaved, 4, v, 8),
                    1e-12);
    }
}

TEST(PlanBubble, CacheReturnsTheSameResult) {
    EvalCache cache;
    Layout l;
    l.pp = 4;
    pipeline::Costs costs;
    auto a = simulate_pipeline(l, 8, costs, &cache);
    auto b = simulate_pipeline(l, 8, costs, &cache);
    EXPECT_EQ(a, b);
    EXPECT_EQ(cache.sims.size(), 1u);
}

// Llama 3 405B at 8K GPUs (pp 16, one-layer chunks v 8, 32 micro-batches; docs/planner.md,
// "term by term"): the interleaved schedule in Megatron-Core's order (`get_schedule_table`:
// groups of n micro-batches through the rank's chunks) with a warm-up of factor·(pp - r - 1) +
// (v - 1)·n forwards, built here by hand. Megatron-Core and PyTorch take factor 2 (PyTorch 1
// only for its split-backward zero-bubble schedules) and n in [pp, m].
namespace {
pipeline::Schedule grouped_interleaved(int pp, int v, int m, int n, int factor) {
    pipeline::Schedule s{pp, v, m, ScheduleKind::interleaved,
                         std::vector<std::vector<pipeline::Action>>(size_t(pp))};
    std::vector<std::pair<int, int>> table;  // (micro-batch, local chunk) of each virtual one
    for (int g = 0; g < m; g += n)
        for (int c = 0; c < v; ++c)
            for (int mb = g; mb < std::min(g + n, m); ++mb) table.push_back({mb, c});
    const int total = m * v;
    for (int r = 0; r < pp; ++r) {
        const int warmup = std::min(factor * (pp - r - 1) + (v - 1) * n, total);
        auto fwd = [&](int k) {
            pipeline::append_compute(s, r, pipeline::Action::forward, table[size_t(k)].first,
                                     table[size_t(k)].second * pp + r);
        };
        auto bwd = [&](int k) {
            pipeline::append_compute(s, r, pipeline::Action::backward, table[size_t(k)].first,
                                     (v - 1 - table[size_t(k)].second) * pp + r);
        };
        for (int k = 0; k < warmup; ++k) fwd(k);
        for (int k = 0; k < total - warmup; ++k) fwd(warmup + k), bwd(k);
        for (int k = total - warmup; k < total; ++k) bwd(k);
    }
    pipeline::validate(s);
    return s;
}
}  // namespace

TEST(PlanBubble, Llama3InterleavedWarmUpsByHand) {
    const int pp = 16, v = 8, m = 32;
    pipeline::Costs costs;  // forward 1, backward 2 a chunk
    // n = pp with Megatron's factor 2 is the shared generator's interleaved schedule, action for
    // action; rank 1 holds 2·14 + 7·16 + 1 = 141 chunks at its peak.
    const pipeline::Schedule megatron = grouped_interleaved(pp, v, m, pp, 2);
    EXPECT_EQ(megatron.ranks, pipeline::make_schedule(ScheduleKind::interleaved, pp, v, m).ranks);
    const pipeline::SimResult two = pipeline::simulate(megatron, costs);
    EXPECT_EQ(two.peak_in_flight[1], 2 * 14 + 7 * 16 + 1);
    EXPECT_EQ(two.peak_in_flight[0], 2 * 15 + 7 * 16 + 1);
    // A larger n holds more: n = m = 32, 2·14 + 7·32 + 1.
    EXPECT_EQ(pipeline::simulate(grouped_interleaved(pp, v, m, m, 2), costs).peak_in_flight[1],
              2 * 14 + 7 * 32 + 1);
    // n < pp under that warm-up deadlocks (Megatron-Core rejects it).
    EXPECT_THROW(pipeline::simulate(grouped_interleaved(pp, v, m, 8, 2), costs), Error);
    // Factor 1, which no fused-backward implementation uses: 14 + 112 + 1 = 127 chunks on rank 1,
    // the same makespan with free messages, longer once each message takes a tenth of a forward.
    const pipeline::Schedule one = grouped_interleaved(pp, v, m, pp, 1);
    const pipeline::SimResult r1 = pipeline::simulate(one, costs);
    EXPECT_EQ(r1.peak_in_flight[1], 14 + 7 * 16 + 1);
    EXPECT_DOUBLE_EQ(r1.makespan, two.makespan);
    costs.latency = 0.1;
    EXPECT_GT(pipeline::simulate(one, costs).makespan,
              pipeline::simulate(megatron, costs).makespan * 1.02);
}
