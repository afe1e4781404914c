// The traced step against the simulator when the stages share cores: the simulation takes each
// action's CPU time on the pipeline's part of the node's cores, and a step that ran as the model
// says is predicted exactly.
#include <gtest/gtest.h>

#include <vector>

#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/parallel/pipeline/trace.hpp"
#include "weft/train/pipeline_trace.hpp"

namespace weft::train {
namespace {

using pipeline::ScheduleKind;

// A step "measured" on one core shared by 2 stages: the shared simulation's timeline as records,
// each compute record with its cost (F 1, B 2) as CPU time.
std::vector<pipeline::TraceRecord> step_on_one_core(const pipeline::Schedule& s) {
    pipeline::Costs c;
    c.cores = 1;
    std::vector<pipeline::TraceRecord> recs = pipeline::trace_records(pipeline::simulate(s, c), 1);
    for (pipeline::TraceRecord& r : recs)
        r.cpu_us = r.category == "forward" ? 1 : r.category == "backward" ? 2 : 0;
    return recs;
}

TEST(PipelineTrace, SharedCoresPredictTheSharedStep) {
    const pipeline::Schedule s = pipeline::make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
    const std::vector<pipeline::TraceRecord> recs = step_on_one_core(s);
    const BubbleReport shared = measure_bubble(s, recs, 1);
    EXPECT_EQ(shared.cores, 1);
    EXPECT_NEAR(shared.simulated, shared.measured, 1e-12);
    for (int k = 0; k < 2; ++k)
        EXPECT_NEAR(shared.idle_simulated[size_t(k)], shared.idle_measured[size_t(k)], 1e-12);
    // From the mean wall times on a processor a stage, the simulation misses: the stretched
    // actions are taken for slow ones that could all run at once.
    const BubbleReport own = measure_bubble(s, recs);
    EXPECT_GT(std::abs(own.simulated - own.measured), 0.01);
}

TEST(PipelineTrace, SharedCoresOnlyWhenTheNodesRanksOutnumberItsCores) {
    // pp 4 on 2 cores, one thread a rank: the 2 cores.
    const StagePlace four_on_two{7, 4, 2, 1};
    EXPECT_EQ(shared_cores({4, four_on_two}), 2);
    // pp 2 x dp 2 on 2 cores: the other pipeline runs beside this one, so 1 core for it.
    EXPECT_EQ(shared_cores({2, four_on_two}), 1);
    // As many ranks as cores, or fewer: a processor a stage.
    EXPECT_EQ(shared_cores({2, StagePlace{7, 2, 2, 1}}), 0);
    EXPECT_EQ(shared_cores({2, StagePlace{7, 2, 16, 1}}), 0);
    // More threads a rank: the thread's CPU time misses the others' work.
    EXPECT_EQ(shared_cores({4, StagePlace{7, 4, 2, 2}}), 0);
    // Stages on two nodes: not modelled.
    EXPECT_EQ(shared_cores({four_on_two, four_on_two, StagePlace{8, 4, 2, 1}, four_on_two}), 0);
}

}  // namespace
}  // namespace weft::train
