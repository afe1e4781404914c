// The planner's pipeline time is the shared simulator's (parallel/pipeline), not a formula.
#include <gtest/gtest.h>

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
