// The search returns only layouts that fit and divide; evaluation is deterministic.
#include <gtest/gtest.h>

#include <map>

#include "support/plan_cluster.hpp"
#include "weft/core/error.hpp"
#include "weft/plan/report.hpp"

using namespace weft;
using namespace weft::plan;

namespace {

Cluster cluster(int nodes, double gib) {
    Cluster c = test::plan_cluster(nodes);
    c.device.peak_flops = {{"bf16", 300e12}, {"fp32", 20e12}};
    c.device.memory_bytes = gib * (1 << 30);
    c.device.gemm = {0.8, 64, 64, 64};
    c.device.kernel_overhead = 5e-6;
    c.device.runtime_bytes = 2.0 * (1 << 30);
    return c;
}

Workload workload(const std::string& model, int64_t batch, int64_t seq) {
    return test::plan_workload(model, batch, seq, precision("bf16"));
}

void check_all_valid(const Workload& w, const Cluster& c, const SearchResult& r) {
    for (const Estimate& e : r.best) {
        const Layout& l = e.cand.layout;
        SCOPED_TRACE(e.cand.describe());
        EXPECT_EQ(l.world_size(), r.world);
        EXPECT_FALSE(check_candidate(w, e.cand).has_value());
        EXPECT_EQ(w.model.config.n_head % l.tp, 0);
        EXPECT_EQ(w.model.config.n_layer % (l.pp * l.vpp), 0);
        EXPECT_EQ(w.global_batch % (int64_t(l.dp) * e.cand.micro_batch), 0);
        EXPECT_LE(e.memory.total(), c.device.memory_bytes);
        EXPECT_GT(e.step_s, 0);
        EXPECT_FALSE(e.pruned);
    }
}

}  // namespace

TEST(PlanSearch, Gpt2On16DevicesReturnsOnlyValidLayouts) {
    const Workload w = workload("gpt2", 64, 1024);
    const Cluster c = cluster(2, 80);
    const SearchResult r = search(w, c, {}, 20);
    ASSERT_EQ(r.best.size(), 20u);
    EXPECT_EQ(r.considered, r.fitting + r.rejected_total());
    check_all_valid(w, c, r);
    for (size_t i = 1; i < r.best.size(); ++i) EXPECT_LE(r.best[i - 1].step_s, r.best[i].step_s);
}

TEST(PlanSearch, TightMemoryRejectsOutOfMemory) {
    const Workload w = workload("megatron-18b", 256, 2048);
    const Cluster c = cluster(4, 40);
    // pp 1 and cp 1: the rejections checked come from tp and memory, and some layouts still fit;
    // open pp and cp made the search 18 s under the sanitizers (now 0.2 s).
    SearchSpace s;
    s.pp = 1, s.cp = 1;
    const SearchResult r = search(w, c, s, 10);
    check_all_valid(w, c, r);
    EXPECT_GT(r.rejected.at("out of memory").first, 0);
    EXPECT_GT(r.rejected.at("indivisible: heads % tp").first, 0);
    EXPECT_GT(r.fitting, 0);
}

TEST(PlanSearch, NothingFitsReportsTheFastestThatDoesNot) {
    const Workload w = workload("gpt3-175b", 8, 2048);
    const SearchResult r = search(w, cluster(1, 8), {}, 5);
    EXPECT_TRUE(r.best.empty());
    ASSERT_TRUE(r.best_unfitting.has_value());
    EXPECT_GT(r.best_unfitting->memory.total(), 8.0 * (1 << 30));
}

TEST(PlanSearch, FixedLayoutIsEvaluatedAlone) {
    const Workload w = workload("gpt2", 64, 1024);
    SearchSpace s;
    s.dp = 4, s.tp = 2, s.pp = 2, s.zero = 1, s.micro_batch = 2, s.sp = true;
    s.recompute = Recompute::none, s.schedule = ScheduleKind::one_f_one_b;
    const SearchResult r = search(w, cluster(2, 80), s, 5);
    ASSERT_EQ(r.considered, 1);
    ASSERT_EQ(r.best.size(), 1u);
    EXPECT_EQ(r.world, 16);
    EXPECT_EQ(r.best[0].micro_batches, 8);
}

TEST(PlanSearch, EvaluationIsDeterministic) {
    const Workload w = workload("gpt3-175b", 1536, 2048);
    const Cluster c = cluster(128, 80);
    Candidate k;
    k.layout.dp = 8, k.layout.tp = 8, k.layout.pp = 16, k.layout.zero = 1;
    k.layout.sequence_parallel = true, k.layout.vpp = 2;
    k.layout.pp_schedule = ScheduleKind::interleaved, k.layout.recompute = Recompute::selective;
    k.micro_batch = 1;
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const std::string a = estimate_json(evaluate(w, c, k)).dump();
    EvalCache cache;
    const std::string b = estimate_json(evaluate(w, c, k, &cache)).dump();
    const std::string d = estimate_json(evaluate(w, c, k, &cache)).dump();
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, d);
    const SearchResult r1 = search(workload("gpt2", 32, 512), cluster(1, 80), {}, 5);
    const SearchResult r2 = search(workload("gpt2", 32, 512), cluster(1, 80), {}, 5);
    EXPECT_EQ(result_json(workload("gpt2", 32, 512), cluster(1, 80), r1).dump(),
              result_json(workload("gpt2", 32, 512), cluster(1, 80), r2).dump());
}

TEST(PlanSearch, AxisPlacementFollowsRankOrder) {
    const Cluster c = cluster(16, 80);
    Layout l;
    l.tp = 8, l.dp = 4, l.pp = 4;
    EXPECT_FALSE(place_axis(c, l, MeshAxis::tp).inter_node);  // ranks 0..7: one node
    EXPECT_TRUE(place_axis(c, l, MeshAxis::dp).inter_node);   // stride 8
    l.tp = 2, l.dp = 4;
    EXPECT_FALSE(place_axis(c, l, MeshAxis::dp).inter_node);  // stride 2, extent 8
    EXPECT_TRUE(place_axis(c, l, MeshAxis::pp).inter_node);
}

// Context parallelism by kind (docs/context_parallel.md): at GPT-2's shape the ring's K/V blocks
// hide behind attention, so it shows no cp time; Ulysses adds its 4 + 4 all-to-alls per layer,
// (cp-1)/cp of [m, q|k|v|out] each, in line with the compute. Ulysses needs heads % cp == 0.
TEST(PlanSearch, ContextParallelKinds) {
    const Workload w = workload("gpt2", 1, 1024);
    const Cluster c = cluster(1, 80);
    Candidate k;
    k.layout.dp = 1, k.layout.cp = 2;
    k.micro_batch = 1;
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const Estimate ring = evaluate(w, c, k);
    EXPECT_EQ(ring.cp_comm_s, 0.0);
    k.layout.cp_kind = CpKind::ulysses;
    ASSERT_FALSE(check_candidate(w, k).has_value());
    const Estimate ulysses = evaluate(w, c, k);
    // Tokens per rank, NH·HS = NKV·HS; q, k, v, out and dout in bf16 (the run's dtype), dq, dk,
    // dv in fp32, as the engine sends them.
    const double m = 512, width = 768;
    auto a2a = [&](double bytes) {
        return c.intra.latency + 0.5 * m * width * bytes / c.intra.bandwidth;
    };
    EXPECT_NEAR(ulysses.cp_comm_s, 12 * (5 * a2a(2) + 3 * a2a(4)), 1e-12);
    EXPECT_GT(ulysses.step_s, ring.step_s);
    // 12 heads do not split over 8 ranks; the ring does not care.
    k.layout.cp = 8;
    const auto no = check_candidate(w, k);
    ASSERT_TRUE(no.has_value());
    EXPECT_EQ(no->reason, "indivisible: heads/tp % ulysses");
    k.layout.cp_kind = CpKind::ring;
    EXPECT_FALSE(check_candidate(w, k).has_value());
    // The hybrid: groups of U must divide cp, and heads must divide by U.
    k.layout.cp_kind = CpKind::hybrid, k.layout.cp_ulysses = 3;
    ASSERT_TRUE(check_candidate(w, k).has_value());
    EXPECT_EQ(check_candidate(w, k)->reason, "indivisible: cp % cp-ulysses");
    k.layout.cp_ulysses = 4;
    EXPECT_FALSE(check_candidate(w, k).has_value());
}

// TokenRing against the one-way ring on a link slow enough that neither hides behind attention:
// per layer the ring shows (kv - attn_f) + (kv + dkv - attn_b), TokenRing (q_f - attn_f) + (q_b -
// attn_b), so the difference is the analytic one with attention cancelled. At cp 2 a shift is
// latency + m·bytes / bandwidth for bytes per token: kv 2·KV in the run's dtype, dkv 2·KV in
// fp32; q_f its larger direction, the fp32 partial (out, lse) back, (A + heads)·4 against the
// queries' A·act; q_b the larger of q, dO and out at act plus the lse in fp32 one way and dQ
// (A·4) back. With MHA TokenRing moves fewer bytes in its busier direction than the ring, in
// either dtype.
TEST(PlanSearch, TokenRingPricesItsOwnVolume) {
    Cluster c = cluster(1, 80);
    c.intra.bandwidth = 1e6;  // bytes/s: every shift far slower than its attention
    for (const char* dtype : {"bf16", "fp32"}) {
        Workload w = workload("gpt2", 1, 1024);
        w.prec = precision(dtype);
        Candidate k;
        k.layout.dp = 1, k.layout.cp = 2;
        k.micro_batch = 1;
        const Estimate ring = evaluate(w, c, k);
        k.layout.ring_bidirectional = true;
        ASSERT_FALSE(check_candidate(w, k).has_value());
        const Estimate token = evaluate(w, c, k);
        const double act = std::string(dtype) == "bf16" ? 2 : 4;
        const double m = 512, A = 768, KV = 768, heads = 12, lat = c.intra.latency;
        auto shift = [&](double bytes) { return lat + m * bytes / c.intra.bandwidth; };
        const double q_f = std::max(A * act, (A + heads) * 4);
        const double q_b = std::max(3 * A * act + heads * 4, A * 4);
        const double per_layer =
            shift(q_f) + shift(q_b) - 2 * shift(2 * KV * act) - shift(2 * KV * 4);
        EXPECT_NEAR(token.cp_comm_s - ring.cp_comm_s, 12 * per_layer, 1e-9 * ring.cp_comm_s)
            << dtype;
        EXPECT_LT(token.cp_comm_s, ring.cp_comm_s) << dtype;
    }
}

// --grad-reduce-dtype bf16 (the engine's bf16 gradient reduction) puts 2 bytes per gradient on
// the wire instead of 4: with latencies zeroed, ZeRO 0's all-reduce time halves exactly; ZeRO 2's
// reduce-scatters halve while its fp32 parameter all-gather does not.
TEST(PlanSearch, Bf16GradientReductionHalvesTheGradientBytes) {
    Workload w = workload("gpt2", 8, 1024);
    w.profile = MemoryProfile::engine;
    w.prec = engine_precision("bf16");
    Cluster c = cluster(2, 80);
    c.intra.latency = c.inter.latency = 0;
    Candidate k;
    k.layout.dp = 8;
    k.micro_batch = 1;
    for (int zero : {0, 2}) {
        SCOPED_TRACE(zero);
        k.layout.zero = zero;
        const Estimate fp32 = evaluate(w, c, k);
        Workload half = w;
        half.prec = with_grad_reduce(w.prec, "bf16");
        const Estimate bf16 = evaluate(half, c, k);
        ASSERT_GT(fp32.dp_comm_s, 0);
        if (zero == 0)
            EXPECT_NEAR(bf16.dp_comm_s, fp32.dp_comm_s / 2, 1e-12 * fp32.dp_comm_s);
        else
            EXPECT_LT(bf16.dp_comm_s, fp32.dp_comm_s);
        EXPECT_GT(bf16.dp_comm_s, fp32.dp_comm_s / 2 - 1e-12 * fp32.dp_comm_s);
        // Model state and activations are the same; the reducer's temporaries differ
        // (parallel::reducer_temp_bytes).
        EXPECT_EQ(bf16.memory.weights, fp32.memory.weights);
        EXPECT_EQ(bf16.memory.grads, fp32.memory.grads);
        EXPECT_EQ(bf16.memory.optimizer, fp32.memory.optimizer);
        EXPECT_EQ(bf16.memory.activations, fp32.memory.activations);
        EXPECT_NE(bf16.memory.buffers, fp32.memory.buffers);
    }
    EXPECT_EQ(with_grad_reduce(w.prec, "fp32").grad_wire, 4);
    EXPECT_THROW(with_grad_reduce(w.prec, "fp16"), Error);
}

// The zero-bubble schedules are layouts the planner prices from the same simulator: at one
// fixed layout, zb-h1's bubble is below 1F1B's and zb-v's below both, and full recomputation
// with them is refused (the engine refuses it: a W reads inputs recomputation overwrote).
TEST(PlanSearch, ZeroBubbleSchedulesCutTheBubble) {
    const Workload w = workload("gpt2", 64, 1024);
    std::map<ScheduleKind, double> bubble;
    for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_v}) {
        SearchSpace s;
        s.dp = 4, s.tp = 1, s.pp = 2, s.zero = 1, s.micro_batch = 2,
        s.sp = false;  // 8 micro-batches
        s.recompute = Recompute::none, s.schedule = kind;
        const SearchResult r = search(w, cluster(1, 80), s, 5);
        ASSERT_EQ(r.best.size(), 1u) << format_schedule_kind(kind);
        EXPECT_EQ(r.best[0].cand.layout.vpp, kind == ScheduleKind::zb_v ? 2 : 1);
        bubble[kind] = r.best[0].bubble;
    }
    EXPECT_LT(bubble[ScheduleKind::zb_h1], bubble[ScheduleKind::one_f_one_b]);
    EXPECT_LT(bubble[ScheduleKind::zb_v], bubble[ScheduleKind::zb_h1]);
    Candidate k;
    k.layout.dp = 2, k.layout.pp = 4, k.layout.pp_schedule = ScheduleKind::zb_h1;
    k.layout.recompute = Recompute::full;
    k.micro_batch = 4;
    const auto no = check_candidate(w, k);
    ASSERT_TRUE(no.has_value());
    EXPECT_EQ(no->reason, "unsupported: zero-bubble schedule with full recomputation");
}
