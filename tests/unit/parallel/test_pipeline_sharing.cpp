// The simulator's processor sharing (Costs::cores): stages that compute at the same time on fewer
// cores than they are slow down in proportion, against hand-worked timelines; with as many cores
// as stages (or more) the simulation is the one without sharing, to the bit. And per core
// (Costs::rank_core): ranks bound to one core share only it.
#include <gtest/gtest.h>

#include <vector>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {
namespace {

// The compute actions of a rank as (start, end) pairs, in order.
std::vector<std::pair<double, double>> compute_spans(const SimResult& r, int rank) {
    std::vector<std::pair<double, double>> out;
    for (const TimedAction& t : r.timeline[size_t(rank)])
        if (t.action.is_compute()) out.emplace_back(t.start, t.end);
    return out;
}

using Spans = std::vector<std::pair<double, double>>;

// GPipe at F 1 and B 2 a chunk on `cores` shared cores, having checked its step unshared.
SimResult gpipe_on_cores(int pp, int m, double cores, double unshared_makespan) {
    const Schedule s = make_schedule(ScheduleKind::gpipe, pp, 1, m);
    Costs c;
    EXPECT_DOUBLE_EQ(simulate(s, c).makespan, unshared_makespan);
    c.cores = cores;
    return simulate(s, c);
}

// GPipe, 2 stages, 2 micro-batches, F 1 and B 2 a chunk, on one core. Rank 0's second forward
// and rank 1's first overlap in [1, 3], both backwards of micro-batch 0 / 1 in [6, 10]: each
// takes twice its cost. The core never idles, so the step is the total work, 12 (9 unshared).
TEST(PipelineSharing, TwoStagesOnOneCoreTakeTwiceAsLongWhenTheyOverlap) {
    const SimResult r = gpipe_on_cores(2, 2, 1, 9);
    EXPECT_DOUBLE_EQ(r.makespan, 12);
    EXPECT_EQ(compute_spans(r, 0), (Spans{{0, 1}, {1, 3}, {6, 10}, {10, 12}}));
    EXPECT_EQ(compute_spans(r, 1), (Spans{{1, 3}, {3, 4}, {4, 6}, {6, 10}}));
    // Compute and idle are wall times, as the engine measures them.
    EXPECT_DOUBLE_EQ(r.compute[0], 9);
    EXPECT_DOUBLE_EQ(r.compute[1], 9);
    EXPECT_DOUBLE_EQ(r.idle[0], 3);
    EXPECT_DOUBLE_EQ(r.bubble, 0.25);
}

// GPipe, 4 stages, 4 micro-batches, F 1 and B 2, on 2 cores: the forward wave runs 1, 2, 3, 4,
// 3, 2, 1 stages at once (speeds 1, 1, 2/3, 1/2, 2/3, 1, 1), the backward wave likewise.
// Forwards end at 1, 2, 3.5, 5.5, 7, 8, 9; backwards at 11, 13, 16, 20, 23, 25, 27 (21
// unshared: (m + p - 1)(F + B)).
TEST(PipelineSharing, FourStagesOnTwoCores) {
    const SimResult r = gpipe_on_cores(4, 4, 2, 21);
    EXPECT_DOUBLE_EQ(r.makespan, 27);
    EXPECT_EQ(
        compute_spans(r, 0),
        (Spans{{0, 1}, {1, 2}, {2, 3.5}, {3.5, 5.5}, {16, 20}, {20, 23}, {23, 25}, {25, 27}}));
    EXPECT_EQ(compute_spans(r, 3),
              (Spans{{3.5, 5.5}, {5.5, 7}, {7, 8}, {8, 9}, {9, 11}, {11, 13}, {13, 16}, {16, 20}}));
    const std::vector<double> compute = {16.5, 18, 18, 16.5};
    for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(r.compute[size_t(k)], compute[size_t(k)]) << k;
    EXPECT_NEAR(r.bubble, 1 - 69.0 / (4 * 27), 1e-12);
}

// A send that costs time takes a share of the core too, and its message leaves when it is done.
// Rank 0's second send [4, 6] runs beside rank 1's first forward (3 of work, [2, 7]); with one
// core never idle the step is the total work, 20.
TEST(PipelineSharing, SendsShareTheCores) {
    const Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
    Costs c;
    c.chunk_forward = {1, 3};
    c.chunk_backward = {2, 2};
    c.send = 1;
    c.cores = 1;
    const SimResult r = simulate(s, c);
    EXPECT_DOUBLE_EQ(r.makespan, 20);
    std::vector<std::pair<double, double>> sends;
    for (const TimedAction& t : r.timeline[0])
        if (t.action.is_send()) sends.emplace_back(t.start, t.end);
    EXPECT_EQ(sends, (Spans{{1, 2}, {4, 6}}));
    EXPECT_EQ(compute_spans(r, 1).at(0), (std::pair<double, double>{2, 7}));
    EXPECT_DOUBLE_EQ(r.busy[0] - r.compute[0], 3);
}

// With at least as many cores as stages no stage ever waits for a core: every timeline is the
// one without sharing, bit for bit, for every kind of schedule, uneven costs, sends and latency.
TEST(PipelineSharing, EnoughCoresIsNoSharing) {
    struct Case {
        ScheduleKind kind;
        int pp, vpp, m;
    };
    const std::vector<Case> cases = {{ScheduleKind::gpipe, 3, 1, 5},
                                     {ScheduleKind::one_f_one_b, 4, 1, 8},
                                     {ScheduleKind::interleaved, 2, 2, 4},
                                     {ScheduleKind::zb_h1, 4, 1, 8},
                                     {ScheduleKind::zb_v, 3, 2, 6}};
    for (const Case& k : cases) {
        SCOPED_TRACE(format_schedule_kind(k.kind));
        Costs c;
        for (int i = 0; i < k.pp * k.vpp; ++i) {
            c.chunk_forward.push_back(0.3 + 0.17 * i);
            c.chunk_backward.push_back(0.9 - 0.05 * i);
            c.chunk_weight.push_back(0.1 * (i % 3));
        }
        c.send = 0.013;
        c.latency = 0.21;
        const Schedule s = make_schedule(k.kind, k.pp, k.vpp, k.m, c);
        const SimResult base = simulate(s, c);
        for (double cores : {double(k.pp), k.pp + 2.5}) {
            c.cores = cores;
            const SimResult r = simulate(s, c);
            EXPECT_EQ(r.makespan, base.makespan);
            EXPECT_EQ(r.bubble, base.bubble);
            EXPECT_EQ(r.compute, base.compute);
            EXPECT_EQ(r.busy, base.busy);
            EXPECT_EQ(r.idle, base.idle);
            EXPECT_EQ(r.peak_in_flight, base.peak_in_flight);
            for (int rank = 0; rank < k.pp; ++rank) {
                const auto &a = r.timeline[size_t(rank)], &b = base.timeline[size_t(rank)];
                ASSERT_EQ(a.size(), b.size());
                for (size_t i = 0; i < a.size(); ++i) {
                    EXPECT_EQ(a[i].start, b[i].start);
                    EXPECT_EQ(a[i].end, b[i].end);
                }
            }
        }
        // Fewer cores than stages: never faster.
        c.cores = k.pp - 1;
        EXPECT_GT(simulate(s, c).makespan, base.makespan);
    }
}

TEST(PipelineSharing, NegativeCoresAreAnError) {
    Costs c;
    c.cores = -1;
    try {
        check_costs(c, 2, 2);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("must be non-negative (0: one per rank), got -1"),
                  std::string::npos);
    }
}

// GPipe, 4 stages, 4 micro-batches, F 1 and B 2, ranks 0 and 2 bound to core 0, 1 and 3 to
// core 1. Worked by hand, forwards: r0 [0,1] [1,2]; at 2 r0 and r2 share core 0 ([2,4] each)
// while r1 runs alone ([2,3]); in [4,6] all four run at half speed; at 6 r2 is alone on core 0
// ([6,7]) while r1 and r3 share core 1 ([6,8]), and core 0 idles in [7,8] (r2 waits for r1's
// last forward). Backwards: r3 [10,12], then r3 and r2 on different cores ([12,14]); at 14 r1
// and r3 share core 1 ([14,18]) while r2 is alone ([14,16]) and core 0 idles in [16,18]; all
// four at half speed in [18,22]; r0 and r2 share core 0 in [22,26] while r1 runs alone
// ([22,24]) and waits; r0 ends alone, [26,28] [28,30]. The step is 30, against 27 on 2 cores
// shared by all four (FourStagesOnTwoCores): bound, a core idles while the other has two ranks.
TEST(PipelineSharing, RanksBoundToCoresShareOnlyTheirOwn) {
    const Schedule s = make_schedule(ScheduleKind::gpipe, 4, 1, 4);
    Costs c;
    c.rank_core = {0, 1, 0, 1};
    const SimResult r = simulate(s, c);
    EXPECT_DOUBLE_EQ(r.makespan, 30);
    EXPECT_EQ(compute_spans(r, 0),
              (Spans{{0, 1}, {1, 2}, {2, 4}, {4, 6}, {18, 22}, {22, 26}, {26, 28}, {28, 30}}));
    EXPECT_EQ(compute_spans(r, 1),
              (Spans{{1, 2}, {2, 3}, {4, 6}, {6, 8}, {14, 18}, {18, 22}, {22, 24}, {26, 28}}));
    EXPECT_EQ(compute_spans(r, 2),
              (Spans{{2, 4}, {4, 6}, {6, 7}, {8, 9}, {12, 14}, {14, 16}, {18, 22}, {22, 26}}));
    EXPECT_EQ(compute_spans(r, 3),
              (Spans{{4, 6}, {6, 8}, {8, 9}, {9, 10}, {10, 12}, {12, 14}, {14, 18}, {18, 22}}));
    for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(r.compute[size_t(k)], 18) << k;
    EXPECT_DOUBLE_EQ(r.bubble, 0.4);
    // The core numbers are labels: the same pairs on other cores run the same step.
    c.rank_core = {5, 2, 5, 2};
    EXPECT_DOUBLE_EQ(simulate(s, c).makespan, 30);
}

// Each rank on a core of its own is the simulation without sharing, to the bit; all on one core
// is Costs::cores 1.
TEST(PipelineSharing, OneRankACoreIsNoSharingAndOneCoreIsAPoolOfOne) {
    Costs c;
    c.chunk_forward = {0.3, 0.47, 0.64};
    c.chunk_backward = {0.9, 0.85, 0.8};
    c.chunk_weight = {0.4, 0.1, 0.3};
    c.send = 0.013;
    c.latency = 0.21;
    const Schedule s = make_schedule(ScheduleKind::zb_h1, 3, 1, 6, c);
    const SimResult base = simulate(s, c);
    auto same = [](const SimResult& a, const SimResult& b) {
        EXPECT_EQ(a.makespan, b.makespan);
        EXPECT_EQ(a.compute, b.compute);
        EXPECT_EQ(a.busy, b.busy);
        for (size_t rank = 0; rank < a.timeline.size(); ++rank) {
            ASSERT_EQ(a.timeline[rank].size(), b.timeline[rank].size());
            for (size_t i = 0; i < a.timeline[rank].size(); ++i) {
                EXPECT_EQ(a.timeline[rank][i].start, b.timeline[rank][i].start);
                EXPECT_EQ(a.timeline[rank][i].end, b.timeline[rank][i].end);
            }
        }
    };
    c.rank_core = {1, 0, 2};
    same(simulate(s, c), base);
    c.rank_core = {3, 3, 3};
    const SimResult one = simulate(s, c);
    Costs pool = c;
    pool.rank_core.clear();
    pool.cores = 1;
    same(one, simulate(s, pool));
    EXPECT_GT(one.makespan, base.makespan);
}

TEST(PipelineSharing, BadCoreBindingsAreErrors) {
    auto error = [](const Costs& c) -> std::string {
        try {
            check_costs(c, 2, 2);
        } catch (const Error& e) {
            return e.what();
        }
        return "no error";
    };
    Costs c;
    c.rank_core = {0};
    EXPECT_NE(error(c).find("rank_core has 1 entries, expected none or one per rank (pp=2)"),
              std::string::npos)
        << error(c);
    c.rank_core = {0, -1};
    EXPECT_NE(error(c).find("rank_core[1] must be a core (>= 0), got -1"), std::string::npos)
        << error(c);
    c.rank_core = {0, 1};
    c.cores = 2;
    EXPECT_NE(error(c).find("expected no shared pool of cores beside them, got cores=2"),
              std::string::npos)
        << error(c);
}

}  // namespace
}  // namespace weft::pipeline
