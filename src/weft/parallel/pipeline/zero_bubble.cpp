// The zero-bubble schedules (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): ZB-H1 and
// ZB-V. The paper draws them by hand for F = B = W and, for real costs, builds them with a
// heuristic over profiled T_F, T_B, T_W (trying several warm-ups and keeping the best); here one
// greedy list scheduler runs the pipeline at the given costs and chooses at each free moment of a
// rank, in order: a B that is ready (the critical path: an earlier rank waits for its gradient), a
// forward if the rank holds fewer activations than its limit, the ready W whose B ended first
// (nothing waits for it: it fills what would be idle time). The limit is what bounds memory: a
// (micro-batch, chunk) holds its activations from its forward to its W.
// - zb-h1: one chunk a rank, limit pp micro-batches: the peak of 1F1B (its first rank), so that
//   the run needs no more activation memory. The paper reaches (p - 1)(F + B - 2W), a third of
//   1F1B's bubble, by counting only what B frees against memory; here a micro-batch's whole
//   activations are held until its W, and at that limit the bubble lands between the two (pp 4,
//   8 micro-batches: 1F1B 27%, here 17%, the paper's 11%, which a limit of pp + 2 reaches).
//   Where the costs are far from uniform (a stage whose F is 6 times its B), the greedy order
//   can lose to 1F1B's, so 1F1B with each W right after its B is the other candidate: zb-h1 is
//   never slower than 1F1B under the costs it was made for.
// - zb-v: two chunks a rank in a V, limit 2pp chunks (pp micro-batches of a whole stage, as 1F1B's
//   first rank holds), and forwards of the later chunk first so that B's start early; the
//   greedy run with places reserved for a micro-batch's later chunk is the other candidate.
// The candidates are timed by simulate() under the same costs; the fastest is kept (the greedy
// one on a tie). Any order that one timing has run cannot deadlock under another, so a schedule
// made for estimated costs runs whatever the real ones are.
#include <limits>
#include <optional>
#include <queue>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {

namespace {

// The greedy list schedule at `costs` with at most `limit` activations held per rank, or none if
// it stalls. With `reserve`, a micro-batch that enters a rank's first chunk reserves a place for
// each later chunk of it there, so the limit never stops one half-way through the rank: in a V,
// rank 0 full of chunk 0's forwards could not run chunk 2pp - 1's, which its B's wait on. That
// never stalls, but reserving early costs a bubble where the timing would not have stalled
// (zb-v at unit costs, pp 8, 32 micro-batches: 5.4% against 3.5%), so both are tried.
std::optional<Schedule> greedy(const Schedule& shape, const Costs& costs, int limit, bool reserve) {
    Schedule s = shape;
    s.ranks.assign(size_t(s.pp), {});
    const int pp = s.pp, C = s.chunks(), M = s.micro_batches;
    std::vector<std::vector<int>> local(static_cast<size_t>(pp));  // each rank's chunks
    for (int c = 0; c < C; ++c) local[size_t(s.owner(c))].push_back(c);

    constexpr double never = std::numeric_limits<double>::infinity();
    // Per chunk: the next micro-batch of each kind; per (chunk, micro-batch): when its F and B
    // ended on their rank, and when their output is usable by the neighbouring chunk (at once on
    // the same rank, after the send and the latency on another).
    std::vector<int> next_f(size_t(C), 0), next_b(size_t(C), 0), next_w(size_t(C), 0);
    const std::vector<std::vector<double>> nevers(size_t(C), std::vector<double>(size_t(M), never));
    std::vector<std::vector<double>> f_end = nevers, f_out = nevers, b_end = nevers, b_out = nevers;
    // Per rank: activations held now, and places reserved for the later chunks of micro-batches
    // that have entered the rank.
    std::vector<int> held(size_t(pp), 0), reserved(size_t(pp), 0);
    std::vector<double> free_at(size_t(pp), 0);
    // The times at which something may become ready: ends of actions and arrivals.
    std::priority_queue<double, std::vector<double>, std::greater<>> events;
    auto crosses = [&](int c, int d) { return d >= 0 && d < C && s.owner(d) != s.owner(c); };

    int64_t left = int64_t(3) * M * C;
    double t = 0;
    while (left > 0) {
        bool picked = false;
        for (int r = 0; r < pp; ++r) {
            if (free_at[size_t(r)] > t) continue;
            int kind = -1, chunk = -1;
            // A ready B: the oldest micro-batch, then the later chunk (nearer the loss).
            for (int c : local[size_t(r)]) {
                const int m = next_b[size_t(c)];
                if (m >= M || f_end[size_t(c)][size_t(m)] > t) continue;
                if (c + 1 < C && b_out[size_t(c + 1)][size_t(m)] > t) continue;
                if (chunk < 0 || m < next_b[size_t(chunk)] ||
                    (m == next_b[size_t(chunk)] && c > chunk))
                    kind = Action::backward_input, chunk = c;
            }
            if (chunk < 0) {
                // A forward: the later chunk first, then the oldest micro-batch.
                const std::vector<int>& mine = local[size_t(r)];
                for (int c : mine) {
                    const int m = next_f[size_t(c)];
                    if (m >= M || (c > 0 && f_out[size_t(c - 1)][size_t(m)] > t)) continue;
                    const int room = limit - held[size_t(r)];
                    if (reserve ? c == mine.front() && reserved[size_t(r)] + int(mine.size()) > room
                                : room < 1)
                        continue;
                    if (chunk < 0 || c > chunk) kind = Action::forward, chunk = c;
                }
            }
            if (chunk < 0) {
                // The W whose B ended first.
                double best = never;
                for (int c : local[size_t(r)]) {
                    const int m = next_w[size_t(c)];
                    if (m >= next_b[size_t(c)] || b_end[size_t(c)][size_t(m)] > t) continue;
                    if (b_end[size_t(c)][size_t(m)] < best)
                        best = b_end[size_t(c)][size_t(m)], kind = Action::backward_weight,
                        chunk = c;
                }
            }
            if (chunk < 0) continue;  // idle until something arrives
            const size_t c = size_t(chunk);
            const Action a{Action::Kind(kind), 0, chunk};
            const double end = t + costs.cost(a);
            // The message after F or B occupies the rank for `send`; it arrives `latency` later.
            const int to = kind == Action::forward ? chunk + 1 : chunk - 1;
            const bool sends = kind != Action::backward_weight && crosses(chunk, to);
            const double out = sends ? end + costs.send + costs.latency : end;
            int micro = 0;
            if (kind == Action::forward) {
                micro = next_f[c]++;
                f_end[c][size_t(micro)] = end, f_out[c][size_t(micro)] = out;
                ++held[size_t(r)];
                const int later = int(local[size_t(r)].size()) - 1;
                reserved[size_t(r)] += chunk == local[size_t(r)].front() ? later : -1;
            } else if (kind == Action::backward_input) {
                micro = next_b[c]++;
                b_end[c][size_t(micro)] = end, b_out[c][size_t(micro)] = out;
            } else {
                micro = next_w[c]++;
                --held[size_t(r)];
            }
            append_compute(s, r, Action::Kind(kind), micro, chunk);
            free_at[size_t(r)] = sends ? end + costs.send : end;
            events.push(free_at[size_t(r)]);
            events.push(out);
            picked = true;
            --left;
        }
        if (picked) continue;  // a free action may have made another ready at once
        while (!events.empty() && events.top() <= t) events.pop();
        if (events.empty()) {
            WEFT_CHECK(!reserve, "internal: the {} generator stalled at pp={} m={}",
                       format_schedule_kind(s.kind), pp, M);
            return std::nullopt;
        }
        t = events.top();
    }
    return s;
}

// 1F1B's order with each backward split into B and, right after it, W: 1F1B's timing exactly.
Schedule split_1f1b(const Schedule& shape) {
    Schedule s = shape;
    s.ranks.assign(size_t(s.pp), {});
    const Schedule plain = make_schedule(ScheduleKind::one_f_one_b, s.pp, s.vpp, s.micro_batches);
    for (int r = 0; r < s.pp; ++r)
        for (const Action& a : plain.ranks[size_t(r)]) {
            if (a.kind == Action::forward) append_compute(s, r, a.kind, a.micro, a.chunk);
            if (a.kind != Action::backward) continue;
            append_compute(s, r, Action::backward_input, a.micro, a.chunk);
            append_compute(s, r, Action::backward_weight, a.micro, a.chunk);
        }
    return s;
}

}  // namespace

void fill_zero_bubble(Schedule& s, const Costs& costs) {
    WEFT_CHECK(s.split_backward(), "internal: {} is not a zero-bubble schedule",
               format_schedule_kind(s.kind));
    check_costs(costs, s.chunks(), s.pp);
    const bool vee = places_in_vee(s.kind);
    std::vector<Schedule> candidates;
    const int limit = vee ? 2 * s.pp : s.pp;
    if (std::optional<Schedule> g = greedy(s, costs, limit, false)) candidates.push_back(*g);
    if (vee) candidates.push_back(*greedy(s, costs, limit, true));
    if (!vee) candidates.push_back(split_1f1b(s));
    size_t best = 0;
    double best_time = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < candidates.size(); ++i) {
        const double t = simulate(candidates[i], costs).makespan;
        if (t < best_time * (1 - 1e-9)) best = i, best_time = t;
    }
    s.ranks = std::move(candidates[best].ranks);
}

}  // namespace weft::pipeline
