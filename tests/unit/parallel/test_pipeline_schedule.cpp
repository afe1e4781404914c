// Schedule generation, validation and simulation: the bubble formulas of the papers, memory
// bounds, deadlock detection and the errors for bad sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {
namespace {

struct Case {
    ScheduleKind kind;
    int pp, vpp, m;
};

// Every valid (kind, pp, vpp, m) with pp <= 8 and m <= 32; `all_m` false keeps m in {p, 2p, 4p,
// ...}.
std::vector<Case> all_cases(bool all_m) {
    std::vector<Case> out;
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            const bool doubling = m >= p && m % p == 0 && ((m / p) & (m / p - 1)) == 0;
            if (!all_m && !doubling) continue;
            out.push_back({ScheduleKind::gpipe, p, 1, m});
            out.push_back({ScheduleKind::one_f_one_b, p, 1, m});
            if (m >= p && m % p == 0)
                for (int v : {2, 3, 4}) out.push_back({ScheduleKind::interleaved, p, v, m});
        }
    }
    return out;
}

std::string name(const Case& c) {
    return fmt::format("{} p={} v={} m={}", format_schedule_kind(c.kind), c.pp, c.vpp, c.m);
}

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(PipelineSchedule, ParsesAndFormatsKinds) {
    for (auto k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                   ScheduleKind::zb_h1, ScheduleKind::zb_v})
        EXPECT_EQ(parse_schedule_kind(format_schedule_kind(k)), k);
    EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
    EXPECT_NE(error_of([] { parse_schedule_kind("zb-h2"); }).find("'zb-h2'"), std::string::npos);
}

TEST(PipelineSchedule, OneFOneBOrderAndMessagePlacement) {
    const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 3);
    using A = Action;
    // Rank 0: one warm-up forward, then F B pairs, then the last backward.
    const std::vector<A> r0 = {
        {A::forward, 0, 0, -1},  {A::send_act, 0, 0, 1},  {A::forward, 1, 0, -1},
        {A::send_act, 1, 0, 1},  {A::recv_grad, 0, 0, 1}, {A::backward, 0, 0, -1},
        {A::forward, 2, 0, -1},  {A::send_act, 2, 0, 1},  {A::recv_grad, 1, 0, 1},
        {A::backward, 1, 0, -1}, {A::recv_grad, 2, 0, 1}, {A::backward, 2, 0, -1}};
    EXPECT_EQ(s.ranks[0], r0);
    // Rank 1 (last): no warm-up; receive right before forward, send right after backward.
    const std::vector<A> r1_head = {{A::recv_act, 0, 1, 0},
                                    {A::forward, 0, 1, -1},
                                    {A::backward, 0, 1, -1},
                                    {A::send_grad, 0, 1, 0}};
    EXPECT_TRUE(std::equal(r1_head.begin(), r1_head.end(), s.ranks[1].begin()));
}

TEST(PipelineSchedule, InterleavedChunkOrderFollowsMegatron) {
    // p=2 v=2 m=4: rank 0 holds chunks 0 and 2. Forwards go micro 0,1 on chunk 0, micro 0,1 on
    // chunk 2, micro 2,3 on chunk 0, ...; warm-up is (2-0-1)*2 + (2-1)*2 = 4 forwards.
    const Schedule s = make_schedule(ScheduleKind::interleaved, 2, 2, 4);
    std::vector<std::pair<int, int>> fwd, bwd;
    int warmup = 0;
    for (const Action& a : s.ranks[0]) {
        if (a.kind == Action::forward) fwd.push_back({a.micro, a.chunk});
        if (a.kind == Action::backward) bwd.push_back({a.micro, a.chunk});
        if (a.kind == Action::forward && bwd.empty()) ++warmup;
    }
    using P = std::vector<std::pair<int, int>>;
    EXPECT_EQ(fwd, (P{{0, 0}, {1, 0}, {0, 2}, {1, 2}, {2, 0}, {3, 0}, {2, 2}, {3, 2}}));
    EXPECT_EQ(bwd, (P{{0, 2}, {1, 2}, {0, 0}, {1, 0}, {2, 2}, {3, 2}, {2, 0}, {3, 0}}));
    EXPECT_EQ(warmup, 5);  // the steady state starts with a forward before its first backward
}

TEST(PipelineSchedule, EveryScheduleValidatesAndRunsWithoutDeadlock) {
    Costs comm;  // sends that cost time and arrive late must not break any schedule either
    comm.send = 0.1;
    comm.latency = 0.7;
    for (const Case& c : all_cases(true)) {
        SCOPED_TRACE(name(c));
        const Schedule s = make_schedule(c.kind, c.pp, c.vpp, c.m);
        ASSERT_NO_THROW(validate(s));
        for (const Costs& costs : {stage_costs(c.vpp), comm}) {
            SimResult r;
            ASSERT_NO_THROW(r = simulate(s, costs));
            // Causality: forward (m, c+1) starts after forward (m, c) ends, backward reversed.
            std::map<std::pair<int, int>, TimedAction> fwd, bwd;
            for (const auto& row : r.timeline) {
                for (size_t i = 0; i < row.size(); ++i) {
                    if (i > 0) {
                        ASSERT_GE(row[i].start, row[i - 1].end);
                    }
                    const Action& a = row[i].action;
                    if (a.kind == Action::forward) fwd.emplace(std::pair{a.micro, a.chunk}, row[i]);
                    if (a.kind == Action::backward)
                        bwd.emplace(std::pair{a.micro, a.chunk}, row[i]);
                }
            }
            for (int m = 0; m < c.m; ++m) {
                for (int k = 0; k + 1 < s.chunks(); ++k) {
                    ASSERT_GE(fwd.at({m, k + 1}).start, fwd.at({m, k}).end);
                    ASSERT_GE(bwd.at({m, k}).start, bwd.at({m, k + 1}).end);
                }
                ASSERT_GE(bwd.at({m, s.chunks() - 1}).start, fwd.at({m, s.chunks() - 1}).end);
            }
        }
    }
}

TEST(PipelineSchedule, BubbleEqualsTheFormulas) {
    // Exact (to rounding) with chunk costs forward f, backward 2f and free messages; with
    // stage_costs that is f = 1/v, so the makespan is 3m + 3(p-1)/v for interleaved.
    for (const Case& c : all_cases(false)) {
        SCOPED_TRACE(name(c));
        const Schedule s = make_schedule(c.kind, c.pp, c.vpp, c.m);
        const SimResult r = simulate(s, stage_costs(c.vpp));
        const double v = c.kind == ScheduleKind::interleaved ? c.vpp : 1;
        EXPECT_NEAR(r.bubble, (c.pp - 1.0) / (v * c.m + c.pp - 1), 1e-12);
        EXPECT_NEAR(r.bubble, ideal_bubble(c.kind, c.pp, c.vpp, c.m), 1e-12);
        EXPECT_NEAR(r.makespan, 3.0 * c.m + 3.0 * (c.pp - 1) / v, 1e-9);
        for (int rank = 0; rank < c.pp; ++rank) {
            EXPECT_NEAR(r.busy[rank], 3.0 * c.m, 1e-9);
            EXPECT_NEAR(r.idle[rank], r.makespan - 3.0 * c.m, 1e-9);
        }
    }
}

TEST(PipelineSchedule, BubbleFormulaHoldsForOtherBackwardRatios) {
    // The schedules' critical path is (m + p - 1)(f + b) (per chunk, m*v in place of m) for any
    // f, b > 0; integer costs keep the check exact.
    for (const Case& c : all_cases(false)) {
        for (double b : {1.0, 3.0}) {
            SCOPED_TRACE(name(c) + fmt::format(" b={}", b));
            Costs costs;
            costs.backward = b;
            const SimResult r = simulate(make_schedule(c.kind, c.pp, c.vpp, c.m), costs);
            EXPECT_EQ(r.makespan, (c.vpp * c.m + c.pp - 1) * (1 + b));
            EXPECT_NEAR(r.bubble, ideal_bubble(c.kind, c.pp, c.vpp, c.m), 1e-12);
        }
    }
}

TEST(PipelineSchedule, PeakActivationsMatchTheBounds) {
    for (const Case& c : all_cases(true)) {
        SCOPED_TRACE(name(c));
        const SimResult r = simulate(make_schedule(c.kind, c.pp, c.vpp, c.m), Costs{});
        for (int rank = 0; rank < c.pp; ++rank) {
            int expected = 0;
            switch (c.kind) {
                case ScheduleKind::gpipe:
                    expected = c.m;
                    break;
                case ScheduleKind::one_f_one_b:
                    expected = std::min(c.pp - rank, c.m);
                    break;
                case ScheduleKind::interleaved:
                    // Megatron: warm-up forwards plus the first steady-state forward, in chunk
                    // activations of 1/v of a stage each.
                    expected =
                        std::min((c.pp - rank - 1) * 2 + (c.vpp - 1) * c.pp + 1, c.vpp * c.m);
                    break;
                case ScheduleKind::zb_h1:
                case ScheduleKind::zb_v:
                    break;  // not in all_cases: ZeroBubble below
            }
            EXPECT_EQ(r.peak_in_flight[rank], expected) << "rank " << rank;
        }
    }
}

TEST(PipelineSchedule, DetectsDeadlockAndNamesStuckRanks) {
    // Both ranks receive first: rank 0 waits for a gradient that rank 1 sends only after the
    // activation that rank 0 sends only after that gradient. Structurally valid, never finishes.
    using A = Action;
    Schedule s{2, 1, 1, ScheduleKind::one_f_one_b, {}};
    s.ranks = {
        {{A::recv_grad, 0, 0, 1}, {A::forward, 0, 0}, {A::send_act, 0, 0, 1}, {A::backward, 0, 0}},
        {{A::recv_act, 0, 1, 0}, {A::forward, 0, 1}, {A::backward, 0, 1}, {A::send_grad, 0, 1, 0}}};
    ASSERT_NO_THROW(validate(s));
    const std::string msg = error_of([&] { simulate(s, Costs{}); });
    EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 stuck at action 0 (recv_grad m0 c0 from 1)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 1 stuck at action 0 (recv_act m0 c1 from 0)"), std::string::npos)
        << msg;

    // A receive that nobody sends: the other rank finishes, this one is stuck.
    Schedule lone{
        2, 1, 1, ScheduleKind::one_f_one_b, {{{A::forward, 0, 0}}, {{A::recv_act, 0, 1, 0}}}};
    const std::string msg2 = error_of([&] { simulate(lone, Costs{}); });
    EXPECT_NE(msg2.find("rank 1 stuck at action 0"), std::string::npos) << msg2;
    EXPECT_NE(msg2.find("no rank sends"), std::string::npos) << msg2;
    EXPECT_EQ(msg2.find("rank 0 stuck"), std::string::npos) << msg2;
}

TEST(PipelineSchedule, ValidateRejectsBrokenSchedules) {
    auto broken = [](auto edit) {
        Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 2);
        edit(s);
        return error_of([&] { validate(s); });
    };
    using A = Action;
    EXPECT_NE(broken([](Schedule& s) {
                  s.ranks[1].pop_back();
              }).find("rank 1: gradient of micro-batch 1 from chunk 1 to chunk 0 is never sent"),
              std::string::npos);
    EXPECT_NE(broken([](Schedule& s) { s.ranks[0].erase(s.ranks[0].end() - 2); })
                  .find("rank 0: gradient of micro-batch 1 from chunk 1 to chunk 0 is never "
                        "received"),
              std::string::npos);
    EXPECT_NE(broken([](Schedule& s) {
                  s.ranks[0].erase(s.ranks[0].begin());
              }).find("missing forward of micro-batch 0 chunk 0"),
              std::string::npos);
    EXPECT_NE(broken([](Schedule& s) {
                  s.ranks[0].push_back({A::forward, 1, 1, -1});
              }).find("chunk 1 belongs to rank 1, not 0"),
              std::string::npos);
    // Send moved before the forward that computes it.
    EXPECT_NE(broken([](Schedule& s) {
                  std::swap(s.ranks[0][0], s.ranks[0][1]);
              }).find("sent (action 0) before computed (1)"),
              std::string::npos);
    EXPECT_NE(broken([](Schedule& s) {
                  s.ranks[0].push_back({A::send_act, 0, 0, 1});
              }).find("sent twice"),
              std::string::npos);
    EXPECT_NE(broken([](Schedule& s) { s.ranks.pop_back(); }).find("expected pp=2"),
              std::string::npos);
}

TEST(PipelineSchedule, ClearErrorsForBadSizes) {
    auto msg = [](ScheduleKind k, int pp, int vpp, int m) {
        return error_of([&] { make_schedule(k, pp, vpp, m); });
    };
    const auto npos = std::string::npos;
    EXPECT_NE(msg(ScheduleKind::interleaved, 4, 2, 6).find("divisible by pp=4, got 6"), npos);
    EXPECT_NE(msg(ScheduleKind::interleaved, 4, 2, 2).find("at least pp=4 micro-batches, got 2"),
              npos);
    EXPECT_NE(msg(ScheduleKind::gpipe, 4, 2, 8).find("expected vpp=1, got vpp=2"), npos);
    EXPECT_NE(msg(ScheduleKind::one_f_one_b, 4, 3, 8).find("expected vpp=1, got vpp=3"), npos);
    EXPECT_NE(msg(ScheduleKind::one_f_one_b, 0, 1, 8).find("at least 1, got pp=0"), npos);
    EXPECT_NE(msg(ScheduleKind::one_f_one_b, 2, 1, 0).find("at least 1, got 0"), npos);
    EXPECT_NE(msg(ScheduleKind::interleaved, 2, 0, 2).find("got vpp=0"), npos);
}

TEST(PipelineSimulator, PerChunkCostsAndLatency) {
    const Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
    Costs costs;
    costs.chunk_forward = {1, 3};  // rank 1 is three times slower forward
    costs.chunk_backward = {2, 2};
    costs.latency = 0.5;
    const SimResult r = simulate(s, costs);
    // Rank 1: forwards at [1.5, 4.5] and [4.5, 7.5]; backwards [7.5, 9.5], [9.5, 11.5].
    // Rank 0: gradients arrive at 10 and 12; its backwards end at 12 and 14.
    EXPECT_DOUBLE_EQ(r.makespan, 14);
    EXPECT_DOUBLE_EQ(r.compute[1], 10);
    EXPECT_DOUBLE_EQ(r.idle[0], 14 - 6);
    EXPECT_NEAR(r.bubble, 1 - 16.0 / 28, 1e-12);

    costs.chunk_forward = {1, 2, 3};
    EXPECT_NE(error_of([&] { simulate(s, costs); }).find("has 3 entries"), std::string::npos);
}

// The zero-bubble schedules: valid, free of deadlock with slow and late messages, within their
// activation limits, and with less bubble than 1F1B (zb-v least) once there are enough
// micro-batches to fill a pipe; never below the paper's bound.
TEST(ZeroBubble, ValidRunAndCutTheBubble) {
    Costs late;
    late.send = 0.1;
    late.latency = 0.7;
    for (int pp : {1, 2, 3, 4, 8}) {
        for (int m : {1, 2, 3, pp, 2 * pp, 4 * pp}) {
            const double onef =
                simulate(make_schedule(ScheduleKind::one_f_one_b, pp, 1, m), Costs{}).bubble;
            double h1 = 0;
            for (ScheduleKind kind : {ScheduleKind::zb_h1, ScheduleKind::zb_v}) {
                const int vpp = kind == ScheduleKind::zb_v ? 2 : 1;
                SCOPED_TRACE(fmt::format("{} pp={} m={}", format_schedule_kind(kind), pp, m));
                const Schedule s = make_schedule(kind, pp, vpp, m);
                ASSERT_NO_THROW(validate(s));
                ASSERT_NO_THROW(simulate(s, late));
                const SimResult r = simulate(s, stage_costs(vpp));
                for (int rank = 0; rank < pp; ++rank)
                    EXPECT_LE(r.peak_in_flight[size_t(rank)], vpp * pp);  // 1F1B's first rank
                EXPECT_GE(r.bubble, ideal_bubble(kind, pp, vpp, m) - 1e-12);
                if (pp == 1) {
                    EXPECT_NEAR(r.bubble, 0, 1e-12);
                } else if (m >= pp && kind == ScheduleKind::zb_h1) {
                    EXPECT_LT(r.bubble, onef);
                    h1 = r.bubble;
                } else if (m >= pp) {
                    EXPECT_LT(r.bubble, h1);
                    if (m >= 2 * pp) {
                        EXPECT_LT(r.bubble, 0.08);
                    }
                }
            }
        }
    }
}

// Generated from per-chunk costs (as measured: a last stage whose forward runs the head, W not
// half of every backward), the zero-bubble schedules stay valid and within their limits, and
// zb-h1 is never slower than 1F1B under the costs it was made for; on the pp 2 case weft
// measured (12 + 4 layers of width 512: F/B/W 214/216/202 and 443/73/67 ms) it is faster.
TEST(ZeroBubble, GeneratedFromMeasuredCosts) {
    auto table = [](int chunks, int seed) {
        Costs c;
        for (int i = 0; i < chunks; ++i) {
            const int k = (i * 7 + seed * 13) % 11;
            c.chunk_forward.push_back(0.5 + k * 0.4);
            c.chunk_backward.push_back(1.0 + ((k * 5) % 7) * 0.3);
            c.chunk_weight.push_back(c.chunk_backward.back() * (0.2 + 0.06 * (k % 6)));
        }
        return c;
    };
    for (int pp : {2, 3, 4}) {
        for (int m : {pp, 2 * pp, 8}) {
            for (int seed = 0; seed < 4; ++seed) {
                SCOPED_TRACE(fmt::format("pp={} m={} seed={}", pp, m, seed));
                const Costs c1 = table(pp, seed);
                const Schedule h1 = make_schedule(ScheduleKind::zb_h1, pp, 1, m, c1);
                ASSERT_NO_THROW(validate(h1));
                const SimResult r = simulate(h1, c1);
                EXPECT_LE(
                    r.makespan,
                    simulate(make_schedule(ScheduleKind::one_f_one_b, pp, 1, m), c1).makespan *
                        (1 + 1e-9));
                for (int peak : r.peak_in_flight) EXPECT_LE(peak, pp);
                const Costs c2 = table(2 * pp, seed);
                const Schedule v = make_schedule(ScheduleKind::zb_v, pp, 2, m, c2);
                ASSERT_NO_THROW(validate(v));
                for (int peak : simulate(v, c2).peak_in_flight) EXPECT_LE(peak, 2 * pp);
            }
        }
    }
    Costs measured;
    measured.chunk_forward = {214, 443};
    measured.chunk_backward = {216 + 202, 73 + 67};
    measured.chunk_weight = {202, 67};
    const double onef =
        simulate(make_schedule(ScheduleKind::one_f_one_b, 2, 1, 8), measured).bubble;
    const double unit = simulate(make_schedule(ScheduleKind::zb_h1, 2, 1, 8), measured).bubble;
    const double fit =
        simulate(make_schedule(ScheduleKind::zb_h1, 2, 1, 8, measured), measured).bubble;
    EXPECT_GT(unit, onef);  // made for F = B = W: what the engine measured first
    EXPECT_LT(fit, onef - 0.01);
    // W is a part of its backward.
    measured.chunk_weight = {500, 67};
    EXPECT_NE(error_of([&] {
                  make_schedule(ScheduleKind::zb_h1, 2, 1, 8, measured);
              }).find("chunk_weight[0] = 500 is more than the chunk's backward 418"),
              std::string::npos);
}

// A V: rank r holds chunks r and 2pp - 1 - r; the turn (chunks pp - 1 and pp) needs no message,
// and W comes after its B, in micro-batch order.
TEST(ZeroBubble, VeePlacementAndSplitBackward) {
    const Schedule s = make_schedule(ScheduleKind::zb_v, 2, 2, 4);
    EXPECT_EQ(s.owner(0), 0);
    EXPECT_EQ(s.owner(1), 1);
    EXPECT_EQ(s.owner(2), 1);
    EXPECT_EQ(s.owner(3), 0);
    int sends = 0, b = 0, w = 0;
    for (const auto& row : s.ranks)
        for (const Action& a : row) {
            sends += a.is_send();
            b += a.kind == Action::backward_input;
            w += a.kind == Action::backward_weight;
            EXPECT_NE(a.kind, Action::backward);
        }
    // Boundaries 0|1 and 2|3 cross ranks, 1|2 does not: 2 x 4 micro-batches x (act + grad).
    EXPECT_EQ(sends, 16);
    EXPECT_EQ(b, 16);
    EXPECT_EQ(w, 16);
    // A W moved before its B is refused.
    Schedule bad = s;
    auto& row = bad.ranks[0];
    const auto wi = std::find_if(row.begin(), row.end(),
                                 [](const Action& a) { return a.kind == Action::backward_weight; });
    std::rotate(row.begin(), wi, wi + 1);
    EXPECT_THROW(validate(bad), Error);
}

// rank_chunks, which the partition and the planner read, lists exactly the chunks each rank's
// list computes, for every kind (a V for zb-v).
TEST(PipelineSchedule, RankChunksAreTheChunksEachRankComputes) {
    const std::pair<ScheduleKind, int> kinds[] = {{ScheduleKind::one_f_one_b, 1},
                                                  {ScheduleKind::interleaved, 2},
                                                  {ScheduleKind::zb_h1, 1},
                                                  {ScheduleKind::zb_v, 2}};
    for (const auto& [kind, vpp] : kinds)
        for (int pp : {1, 2, 3, 4}) {
            const Schedule s = make_schedule(kind, pp, vpp, 2 * pp);
            for (int r = 0; r < pp; ++r) {
                std::set<int> computed;
                for (const Action& a : s.ranks[size_t(r)])
                    if (a.is_compute()) computed.insert(a.chunk);
                const std::vector<int> listed = rank_chunks(r, pp, vpp, places_in_vee(kind));
                EXPECT_EQ(std::vector<int>(computed.begin(), computed.end()), listed)
                    << format_schedule_kind(kind) << " pp " << pp << " rank " << r;
            }
        }
    Layout l;
    l.pp = 3, l.vpp = 2, l.pp_schedule = ScheduleKind::zb_v;
    EXPECT_EQ(rank_chunks(0, l), (std::vector<int>{0, 5}));
    EXPECT_EQ(chunk_owner(4, l), 1);
}

}  // namespace
}  // namespace weft::pipeline
