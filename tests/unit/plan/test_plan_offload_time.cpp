// The planner's disk time under --offload against hand-worked cases: the bytes a step moves,
// bytes / bandwidth, and the overlap rule (max behind the forward, sum in the step).
#include <gtest/gtest.h>

#include "support/plan_cluster.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/zero_layout.hpp"
#include "weft/plan/cost.hpp"
#include "weft/plan/offload_time.hpp"

using namespace weft;
using namespace weft::plan;

TEST(PlanOffloadTime, BytesOfEachPart) {
    // Optimizer state 8 GB, master 4 GB, the copy in memory: the pass reads and writes both.
    OffloadTraffic t = offload_traffic({8e9, 4e9, 0, 0}, 2, false);
    EXPECT_DOUBLE_EQ(t.pass_read, 12e9);
    EXPECT_DOUBLE_EQ(t.pass_written, 12e9);
    EXPECT_DOUBLE_EQ(t.norm_read + t.layers_read + t.layers_written, 0);
    // The copy in files, S = 2 GB of weights with a 0.5 GB embedding, 2 micro-batches: the pass
    // also reads the gradients and writes the weights; the norm reads the gradients; each
    // micro-batch reads the weights twice less the held embedding and writes the gradients, the
    // second one reading them back first.
    t = offload_traffic({8e9, 4e9, 2e9, 0.5e9}, 2, false);
    EXPECT_DOUBLE_EQ(t.pass_read, 14e9);
    EXPECT_DOUBLE_EQ(t.pass_written, 14e9);
    EXPECT_DOUBLE_EQ(t.norm_read, 2e9);
    EXPECT_DOUBLE_EQ(t.layers_read, 2 * (4e9 - 0.5e9) + 2e9);
    EXPECT_DOUBLE_EQ(t.layers_written, 4e9);
    // ZeRO 1 over dp > 1: the rest of each unit read, the slice read back, the unit rewritten.
    const OffloadTraffic g = offload_traffic({8e9, 4e9, 2e9, 0.5e9}, 2, true);
    EXPECT_DOUBLE_EQ(g.pass_read - t.pass_read, 4e9);
    EXPECT_DOUBLE_EQ(g.pass_written - t.pass_written, 2e9);
}

TEST(PlanOffloadTime, MaxBehindTheForwardSumInTheStep) {
    const Disk disk{4e9, 2e9};  // reads at 4 GB/s, writes at 2
    const OffloadTraffic pass = offload_traffic({8e9, 4e9, 0, 0}, 1, false);
    EXPECT_DOUBLE_EQ(disk_time(disk, pass.pass_read, pass.pass_written), 12.0 / 4 + 12.0 / 2);
    // Behind: a 9 s pass behind a 5 s forward shows 4 s; behind a 10 s forward, nothing.
    EXPECT_DOUBLE_EQ(offload_time(pass, disk, true, 2, 5, 40).exposed_s, 4);
    EXPECT_DOUBLE_EQ(offload_time(pass, disk, true, 2, 10, 40).exposed_s, 0);
    // In the step it shows whole; an update slower than the disk sets the pass.
    EXPECT_DOUBLE_EQ(offload_time(pass, disk, false, 2, 10, 40).exposed_s, 9);
    EXPECT_DOUBLE_EQ(offload_time(pass, disk, false, 12, 10, 40).pass_s, 12);
    // The copy in files (in the step): the norm's read shows, the layers' transfers only beyond
    // the compute (reads 2 x 2 - 0.5 GB at 4, writes 2 GB at 2: 1.875 s).
    const OffloadTraffic f = offload_traffic({8e9, 4e9, 2e9, 0.5e9}, 1, false);
    const double pass_s = 14.0 / 4 + 14.0 / 2, norm = 2.0 / 4;
    EXPECT_DOUBLE_EQ(offload_time(f, disk, false, 0, 0, 40).exposed_s, pass_s + norm);
    EXPECT_DOUBLE_EQ(offload_time(f, disk, false, 0, 0, 1).exposed_s, pass_s + norm + 0.875);
}

// The whole estimate: the bytes are the optimizer's own count (optim/registry, through
// parallel::zero_state_bytes) plus the master, the pass replaces the in-memory update, and it
// runs behind the forward on one rank only.
TEST(PlanOffloadTime, EstimateTakesTheOptimizersBytesAndTheOverlapRule) {
    Cluster c = test::plan_cluster(1);
    c.disk = {3e9, 2e9};
    const model::ModelConfig cfg = load_model("tiny").config;
    for (const char* optimizer : {"adamw", "lion"}) {
        SCOPED_TRACE(optimizer);
        Workload w;
        w.model = load_model("tiny");
        w.global_batch = 2, w.seq_len = 64;
        w.profile = MemoryProfile::engine;
        w.prec = with_optimizer(engine_precision("bf16"), optimizer);
        w.optimizer = optimizer;
        w.offload_group_floats = int64_t(1) << 16;
        w.bf16_working_copy = true;
        Candidate k;
        k.layout.dp = 1;
        k.micro_batch = 1;
        const Estimate in_memory = [&] {
            Workload m = w;
            m.offload_group_floats = 0;
            return evaluate(m, c, k);
        }();
        const Estimate one = evaluate(w, c, k);
        const parallel::ZeroLayout z(model::build_param_layout(cfg), 1, 0);
        const parallel::ModelStateBytes s = parallel::zero_state_bytes(z, 0, optimizer, true);
        EXPECT_DOUBLE_EQ(one.offload_read_bytes, double(s.optimizer + s.master));
        EXPECT_DOUBLE_EQ(one.offload_written_bytes, one.offload_read_bytes);
        EXPECT_NEAR(one.offload_io_s, one.offload_read_bytes * (1 / 3e9 + 1 / 2e9), 1e-12);
        EXPECT_TRUE(one.offload_behind);
        EXPECT_NEAR(one.step_s, in_memory.step_s - in_memory.optimizer_s + one.offload_exposed_s,
                    1e-12);
        // dp 2 (ZeRO 0, each rank the whole state): in the step, the node's disk shared by two.
        k.layout.dp = 2;
        w.global_batch = 4;
        const Estimate two = evaluate(w, c, k);
        EXPECT_FALSE(two.offload_behind);
        EXPECT_NEAR(two.offload_io_s, 2 * one.offload_io_s, 1e-12);
        EXPECT_NEAR(two.offload_exposed_s, std::max(two.optimizer_s, two.offload_io_s), 1e-12);
        k.layout.dp = 1;
    }
}
