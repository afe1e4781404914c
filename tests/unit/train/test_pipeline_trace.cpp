// The traced step against the simulator when the stages share cores: the simulation takes each
// action's CPU time on the pipeline's part of the node's cores, and a step that ran as the model
// says is predicted exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/parallel/pipeline/trace.hpp"
#include "weft/train/pipeline_trace.hpp"

namespace weft::train {
namespace {

using pipeline::ScheduleKind;

// A step "measured" as the simulator runs it under `sharing`: its timeline as records, each
// compute record with its cost (F 1, B 2) as CPU time.
std::vector<pipeline::TraceRecord> step_shared(const pipeline::Schedule& s,
                                               const CoreSharing& sharing) {
    pipeline::Costs c;
    c.cores = sharing.cores;
    c.rank_core = sharing.rank_core;
    std::vector<pipeline::TraceRecord> recs = pipeline::trace_records(pipeline::simulate(s, c), 1);
    for (pipeline::TraceRecord& r : recs)
        r.cpu_us = r.category == "forward" ? 1 : r.category == "backward" ? 2 : 0;
    return recs;
}

TEST(PipelineTrace, SharedCoresPredictTheSharedStep) {
    const pipeline::Schedule s = pipeline::make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
    const std::vector<pipeline::TraceRecord> recs = step_shared(s, {1, {}});
    const BubbleReport shared = measure_bubble(s, recs, {1, {}});
    EXPECT_EQ(shared.cores, 1);
    EXPECT_NEAR(shared.simulated, shared.measured, 1e-12);
    for (int k = 0; k < 2; ++k)
        EXPECT_NEAR(shared.idle_simulated[size_t(k)], shared.idle_measured[size_t(k)], 1e-12);
    // From the mean wall times on a processor a stage, the simulation misses: the stretched
    // actions are taken for slow ones that could all run at once.
    const BubbleReport own = measure_bubble(s, recs);
    EXPECT_GT(std::abs(own.simulated - own.measured), 0.01);
}

// 4 stages bound to 2 cores as mpirun --bind-to core --map-by core places them (0 1 0 1): the
// simulation that shares each core among the stages bound to it predicts each stage's idle
// share; a pool of 2 cores that any stage may take misses it by several points on some stage.
TEST(PipelineTrace, BoundCoresPredictTheBoundStep) {
    const pipeline::Schedule s = pipeline::make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
    const CoreSharing bound{0, {0, 1, 0, 1}};
    const std::vector<pipeline::TraceRecord> recs = step_shared(s, bound);
    const BubbleReport r = measure_bubble(s, recs, bound);
    EXPECT_EQ(r.cores, 2);
    EXPECT_EQ(r.rank_core, bound.rank_core);
    EXPECT_NEAR(r.simulated, r.measured, 1e-12);
    const BubbleReport pool = measure_bubble(s, recs, {2, {}});
    double worst = 0;
    for (int k = 0; k < 4; ++k) {
        EXPECT_NEAR(r.idle_simulated[size_t(k)], r.idle_measured[size_t(k)], 1e-12) << k;
        worst = std::max(worst,
                         std::abs(pool.idle_simulated[size_t(k)] - pool.idle_measured[size_t(k)]));
    }
    EXPECT_GT(worst, 0.03);
    EXPECT_NE(r.describe().find("each stage on the one it is bound to (0 1 0 1)"),
              std::string::npos)
        << r.describe();
}

TEST(PipelineTrace, SharedCoresOnlyWhenTheNodesRanksOutnumberItsCores) {
    auto none = [](const CoreSharing& c) { return !c.shared(); };
    // pp 4 on 2 cores, one thread a rank: the 2 cores.
    const StagePlace four_on_two{7, 4, 2, 1, -1};
    EXPECT_EQ(shared_cores({4, four_on_two}).cores, 2);
    EXPECT_TRUE(shared_cores({4, four_on_two}).rank_core.empty());
    // pp 2 x dp 2 on 2 cores: the other pipeline runs beside this one, so 1 core for it.
    EXPECT_EQ(shared_cores({2, four_on_two}).cores, 1);
    // As many ranks as cores, or fewer: a processor a stage.
    EXPECT_TRUE(none(shared_cores({2, StagePlace{7, 2, 2, 1, -1}})));
    EXPECT_TRUE(none(shared_cores({2, StagePlace{7, 2, 16, 1, -1}})));
    // Bound to a core each, as many ranks as cores: a processor a stage too.
    EXPECT_TRUE(none(shared_cores({StagePlace{7, 2, 2, 1, 0}, StagePlace{7, 2, 2, 1, 1}})));
    // More threads a rank: the thread's CPU time misses the others' work.
    EXPECT_TRUE(none(shared_cores({4, StagePlace{7, 4, 2, 2, -1}})));
    // Stages on two nodes: not modelled.
    EXPECT_TRUE(
        none(shared_cores({four_on_two, four_on_two, StagePlace{8, 4, 2, 1, -1}, four_on_two})));
}

TEST(PipelineTrace, StagesBoundToCoresShareTheirOwn) {
    std::vector<StagePlace> stages;
    for (int core : {0, 1, 0, 1}) stages.push_back({7, 4, 2, 1, core});
    CoreSharing c = shared_cores(stages);
    EXPECT_EQ(c.cores, 0);
    EXPECT_EQ(c.rank_core, (std::vector<int>{0, 1, 0, 1}));
    // One stage free to move: the pool.
    stages[2].core = -1;
    c = shared_cores(stages);
    EXPECT_EQ(c.cores, 2);
    EXPECT_TRUE(c.rank_core.empty());
    // Bound, but beside another pipeline's ranks on the node (dp 2): the pool, the pipeline's
    // part of the cores.
    std::vector<StagePlace> two(2, StagePlace{7, 4, 2, 1, 0});
    two[1].core = 1;
    c = shared_cores(two);
    EXPECT_EQ(c.cores, 1);
    EXPECT_TRUE(c.rank_core.empty());
}

}  // namespace
}  // namespace weft::train
