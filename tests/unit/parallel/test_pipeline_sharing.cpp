// The simulator's processor sharing (Costs::cores): stages that compute at the same time on fewer
// cores than they are slow down in proportion, against hand-worked timelines; with as many cores
// as stages (or more) the simulation is the one without sharing, to the bit.
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
        check_costs(c, 2);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("must be non-negative (0: one per rank), got -1"),
                  std::string::npos);
    }
}

}  // namespace
}  // namespace weft::pipeline
