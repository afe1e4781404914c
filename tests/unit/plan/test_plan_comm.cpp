// Communication terms of the step time: hierarchical (multi-rail) bandwidth of groups that span
// nodes, tensor-parallel overlap, all-gather context parallelism, ZeRO-2 with a pipeline, fp8
// products at their own peak.
#include <gtest/gtest.h>

#include "support/plan_cluster.hpp"
#include "weft/plan/search.hpp"

using namespace weft;
using namespace weft::plan;

namespace {

Workload workload(const std::string& model, int64_t batch, int64_t seq) {
    return test::plan_workload(model, batch, seq, megatron_precision("bf16"));
}

}  // namespace

// NCCL runs one ring per rail: a group with g members in each node crosses nodes on g NICs at
// once, so its per-device bandwidth is g rails' (up to NVLink's); with one member per node
// (tp = 8) it is one rail's.
TEST(PlanComm, GroupsSpanningNodesUseEveryRail) {
    const Cluster c = test::plan_cluster(4);  // 8 per node, 300 GB/s inside, 25 GB/s a rail
    Layout l;
    l.dp = 32;
    EXPECT_DOUBLE_EQ(place_axis(c, l, MeshAxis::dp).link.bandwidth, 200e9);
    l.dp = 8, l.tp = 4;
    EXPECT_DOUBLE_EQ(place_axis(c, l, MeshAxis::dp).link.bandwidth, 50e9);
    l.dp = 4, l.tp = 8;
    EXPECT_DOUBLE_EQ(place_axis(c, l, MeshAxis::dp).link.bandwidth, 25e9);
    l.dp = 2, l.tp = 4;  // within a node: NVLink
    EXPECT_DOUBLE_EQ(place_axis(c, l, MeshAxis::dp).link.bandwidth, 300e9);
}

TEST(PlanComm, TensorParallelOverlapHidesCollectivesBehindProducts) {
    Workload w = workload("gpt3-175b", 16, 2048);
    const Cluster c = test::plan_cluster(1);
    Candidate k;
    k.layout.dp = 1, k.layout.tp = 8, k.layout.sequence_parallel = true;
    const Estimate plain = evaluate(w, c, k);
    w.tp_overlap = true;
    const Estimate overlapped = evaluate(w, c, k);
    EXPECT_GT(plain.tp_comm_s, 0);
    EXPECT_LT(overlapped.tp_comm_s, plain.tp_comm_s);
    EXPECT_NEAR(plain.step_s - overlapped.step_s, plain.tp_comm_s - overlapped.tp_comm_s,
                1e-9 * plain.step_s);
}

// Llama 3's 128K stage (Dubey et al. 2024, Sec. 3.3.2): K and V all-gathered over cp forward,
// their gradients reduce-scattered backward; (cp-1)/cp of the gathered bytes cross each rank.
TEST(PlanComm, AllGatherContextParallelism) {
    Workload w = workload("llama-3-8b", 1, 8192);
    const Cluster c = test::plan_cluster(1);
    Candidate k;
    k.layout.dp = 1, k.layout.cp = 4;
    k.cp_all_gather = true;
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const Estimate e = evaluate(w, c, k);
    const double m = 8192 / 4, kv = 8 * 128, n = 4, bw = c.intra.bandwidth, a = c.intra.latency;
    const double fwd = (n - 1) * a + (n - 1) / n * 2 * m * n * kv * 2 / bw;
    const double bwd = (n - 1) * a + (n - 1) / n * 2 * m * n * kv * 4 / bw;
    EXPECT_NEAR(e.cp_comm_s, 32 * (fwd + bwd), 1e-12);
}

// FSDP / ZeRO-2 with a pipeline (Llama 3, Megatron-Core) is priced on GPUs; the engine refuses it.
TEST(PlanComm, Zero2WithPipelineOnGpusOnly) {
    Workload w = workload("gpt3-175b", 64, 2048);
    Candidate k;
    k.layout.dp = 4, k.layout.tp = 8, k.layout.pp = 4, k.layout.zero = 2;
    EXPECT_FALSE(check_candidate(w, k).has_value());
    const Estimate e = evaluate(w, test::plan_cluster(16), k);
    EXPECT_GT(e.dp_comm_s, 0);
    w.profile = MemoryProfile::engine;
    EXPECT_EQ(check_candidate(w, k)->reason, "incompatible: zero >= 2 with pp > 1");
}

// fp8 (Transformer Engine): products at the fp8 peak with their own efficiency, the rest at
// bf16's. Doubling the fp8 peak leaves a bf16 run alone and speeds an fp8 one.
TEST(PlanComm, Fp8ProductsRunAtTheirOwnPeak) {
    Cluster c = test::plan_cluster(1);
    c.device.peak_flops = {{"bf16", 100e12}, {"fp8", 200e12}};
    c.device.gemm_by_dtype = {{"fp8", {0.5, 64, 64, 64}}};
    Workload w = workload("gpt2", 8, 1024);
    Candidate k;
    k.layout.dp = 1;
    const double bf16 = evaluate(w, c, k).step_s;
    w.prec = megatron_precision("fp8");
    const double fp8 = evaluate(w, c, k).step_s;
    c.device.peak_flops = {{"bf16", 100e12}, {"fp8", 400e12}};
    EXPECT_LT(evaluate(w, c, k).step_s, fp8);
    w.prec = megatron_precision("bf16");
    EXPECT_DOUBLE_EQ(evaluate(w, c, k).step_s, bf16);
}

// ZeRO-3: backward's gathers and reduce-scatters share the links, so when communication
// dominates, what shows is all of it less the compute it runs under (forward and backward).
TEST(PlanComm, Zero3BackwardCollectivesShareTheLinks) {
    const Workload w = workload("gpt2", 16, 1024);
    Cluster c = test::plan_cluster(2);
    c.inter.bandwidth = 1e8;  // 0.1 GB/s: the gathers dwarf the compute
    Candidate k;
    k.layout.dp = 16, k.layout.zero = 3;
    const Estimate e = evaluate(w, c, k);
    EXPECT_GT(e.dp_comm_s, 10 * e.pipeline_s);
    EXPECT_NEAR(e.dp_exposed_s, e.dp_comm_s - e.pipeline_s, 1e-9 * e.dp_comm_s);
}
