#include "weft/parallel/pipeline/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "weft/core/error.hpp"

namespace weft::pipeline {

double Costs::forward_cost(int chunk) const {
    return chunk_forward.empty() ? forward : chunk_forward[chunk];
}

double Costs::backward_cost(int chunk) const {
    return chunk_backward.empty() ? backward : chunk_backward[chunk];
}

double Costs::weight_cost(int chunk) const {
    return chunk_weight.empty() ? weight_share * backward_cost(chunk) : chunk_weight[chunk];
}

double Costs::cost(const Action& a) const {
    switch (a.kind) {
        case Action::forward:
            return forward_cost(a.chunk);
        case Action::backward:
            return backward_cost(a.chunk);
        case Action::backward_input:
            return backward_cost(a.chunk) - weight_cost(a.chunk);
        case Action::backward_weight:
            return weight_cost(a.chunk);
        default:
            return 0;
    }
}

Costs stage_costs(int vpp, double forward, double backward) {
    WEFT_CHECK(vpp >= 1, "virtual pipeline size must be at least 1, got vpp={}", vpp);
    Costs c;
    c.forward = forward / vpp;
    c.backward = backward / vpp;
    return c;
}

double ideal_bubble(ScheduleKind kind, int pp, int vpp, int micro_batches) {
    const double p = pp, m = micro_batches;
    if (kind == ScheduleKind::zb_v) return 0;
    if (kind == ScheduleKind::zb_h1) return (p - 1) / (3 * m + p - 1);
    const double v = kind == ScheduleKind::interleaved ? vpp : 1;
    return (p - 1) / (v * m + p - 1);
}

void check_costs(const Costs& c, int chunks, int pp) {
    auto check_vector = [&](const std::vector<double>& v, const char* name) {
        WEFT_CHECK(v.empty() || static_cast<int>(v.size()) == chunks,
                   "Costs::{} has {} entries, expected none or one per chunk (pp*vpp={})", name,
                   v.size(), chunks);
        for (size_t i = 0; i < v.size(); ++i)
            WEFT_CHECK(v[i] >= 0, "Costs::{}[{}] must be non-negative, got {}", name, i, v[i]);
    };
    check_vector(c.chunk_forward, "chunk_forward");
    check_vector(c.chunk_backward, "chunk_backward");
    check_vector(c.chunk_weight, "chunk_weight");
    for (size_t i = 0; i < c.chunk_weight.size(); ++i)
        WEFT_CHECK(c.chunk_weight[i] <= c.backward_cost(int(i)),
                   "Costs::chunk_weight[{}] = {} is more than the chunk's backward {}: W is a part "
                   "of the backward",
                   i, c.chunk_weight[i], c.backward_cost(int(i)));
    WEFT_CHECK(c.forward >= 0 && c.backward >= 0 && c.send >= 0 && c.latency >= 0,
               "costs must be non-negative, got forward={} backward={} send={} latency={}",
               c.forward, c.backward, c.send, c.latency);
    WEFT_CHECK(c.cores >= 0,
               "the cores the ranks share must be non-negative (0: one per rank), got {}", c.cores);
    WEFT_CHECK(c.rank_core.empty() || static_cast<int>(c.rank_core.size()) == pp,
               "Costs::rank_core has {} entries, expected none or one per rank (pp={})",
               c.rank_core.size(), pp);
    for (size_t r = 0; r < c.rank_core.size(); ++r)
        WEFT_CHECK(c.rank_core[r] >= 0, "Costs::rank_core[{}] must be a core (>= 0), got {}", r,
                   c.rank_core[r]);
    WEFT_CHECK(c.rank_core.empty() || c.cores == 0,
               "ranks bound to cores (Costs::rank_core) share only their own core; expected no "
               "shared pool of cores beside them, got cores={}",
               c.cores);
    WEFT_CHECK(c.weight_share >= 0 && c.weight_share <= 1,
               "the weight gradients' share of a backward must be in [0, 1], got {}",
               c.weight_share);
}

namespace {

// Explains a deadlock: every rank that still has actions is blocked on a recv.
std::string describe_deadlock(const Schedule& s, const std::vector<size_t>& pc) {
    std::map<MessageId, std::pair<int, size_t>> senders;  // message -> (rank, action index)
    for (int r = 0; r < s.pp; ++r)
        for (size_t i = 0; i < s.ranks[r].size(); ++i)
            if (s.ranks[r][i].is_send())
                senders.emplace(message_id(s.ranks[r][i], r), std::pair{r, i});

    std::string msg = "pipeline schedule deadlocks:";
    for (int r = 0; r < s.pp; ++r) {
        if (pc[r] == s.ranks[r].size()) continue;
        const Action& a = s.ranks[r][pc[r]];
        auto it = senders.find(message_id(a, r));
        msg += fmt::format(" rank {} stuck at action {} ({}),", r, pc[r], format_action(a));
        if (it == senders.end())
            msg += " which no rank sends;";
        else
            msg += fmt::format(" sent only at rank {} action {};", it->second.first,
                               it->second.second);
    }
    msg.back() = '.';
    return msg;
}

}  // namespace

SimResult simulate(const Schedule& s, const Costs& costs) {
    WEFT_CHECK(static_cast<int>(s.ranks.size()) == s.pp,
               "schedule has action lists for {} ranks, expected pp={}", s.ranks.size(), s.pp);
    check_costs(costs, s.chunks(), s.pp);

    SimResult res;
    res.compute.assign(s.pp, 0);
    res.busy.assign(s.pp, 0);
    res.peak_in_flight.assign(s.pp, 0);
    res.timeline.resize(s.pp);

    std::vector<size_t> pc(s.pp, 0);      // next action of each rank
    std::vector<double> now(s.pp, 0);     // time each rank reached its next action
    std::vector<int> held(s.pp, 0);       // activations held now
    std::vector<bool> blocked(s.pp);      // on a recv whose message is not sent yet
    std::map<MessageId, double> arrived;  // message -> arrival time, once sent
    std::map<MessageId, int> waiting;     // message -> rank blocked on it

    // The action that takes time (a compute or a send) under way on each rank. Its end is
    // re-timed only when its speed changes, so that without sharing it is start + cost exactly.
    struct Work {
        bool on = false, retimed = false;
        double end = 0, speed = 1, cost = 0;
    };
    std::vector<Work> work(s.pp);
    // The pools of processors the ranks share: one of `cores` (0: as many as ranks), or a core
    // of its own for each value of rank_core.
    std::vector<int> pool(s.pp, 0);
    std::vector<double> capacity = {costs.cores};
    if (!costs.rank_core.empty()) {
        std::map<int, int> index;  // core -> pool
        for (int r = 0; r < s.pp; ++r)
            pool[size_t(r)] =
                index.emplace(costs.rank_core[size_t(r)], int(index.size())).first->second;
        capacity.assign(index.size(), 1.0);
    }
    std::vector<int> working(capacity.size(), 0);  // ranks computing or sending, per pool
    auto reshare = [&](double t) {
        for (int r = 0; r < s.pp; ++r) {
            Work& w = work[size_t(r)];
            if (!w.on) continue;
            const int p = pool[size_t(r)];
            const double cap = capacity[size_t(p)];
            const double speed =
                cap > 0 && working[size_t(p)] > cap ? cap / working[size_t(p)] : 1.0;
            if (w.speed != speed) {
                w.end = t + (w.end - t) * w.speed / speed;
                w.speed = speed;
                w.retimed = true;
            }
        }
    };
    auto done = [&](int r, double end) {
        res.timeline[r].push_back({now[r], end, s.ranks[r][pc[r]]});
        now[r] = end;
        ++pc[r];
    };
    auto receive = [&](int r, double arrival) { done(r, std::max(now[r], arrival)); };
    auto send_arrives = [&](int r, double end) {
        const Action& a = s.ranks[r][pc[r]];
        const MessageId id = message_id(a, r);
        WEFT_CHECK(arrived.emplace(id, end + costs.latency).second,
                   "rank {} action {} ({}): this message was already sent", r, pc[r],
                   format_action(a));
        if (auto w = waiting.find(id); w != waiting.end()) {
            blocked[w->second] = false;
            receive(w->second, end + costs.latency);
            waiting.erase(w);
        }
    };
    // Ends rank r's action at `end`, having taken `took` of its time.
    auto finish = [&](int r, double end, double took) {
        const Action& a = s.ranks[r][pc[r]];
        if (a.is_compute()) res.compute[r] += took;
        res.busy[r] += took;
        if (a.is_send()) send_arrives(r, end);
        done(r, end);
    };

    constexpr double never = std::numeric_limits<double>::infinity();
    for (;;) {
        // The next event, earliest first (ties by rank): a rank's action ends, or a rank reaches
        // its next action.
        int r = -1;
        double t = never;
        for (int k = 0; k < s.pp; ++k) {
            const double at = work[k].on                                 ? work[k].end
                              : blocked[k] || pc[k] == s.ranks[k].size() ? never
                                                                         : now[k];
            if (at < t) {
                t = at;
                r = k;
            }
        }
        if (r < 0) break;
        if (Work& w = work[r]; w.on) {
            w.on = false;
            --working[size_t(pool[size_t(r)])];
            reshare(t);
            // The cost itself unless shared: without sharing the sums are the same to the bit.
            finish(r, t, w.retimed ? t - now[r] : w.cost);
            continue;
        }
        const Action& a = s.ranks[r][pc[r]];
        if (a.is_compute()) {
            // Activations are held from the forward to the last backward that reads them.
            const bool frees = a.kind == Action::backward || a.kind == Action::backward_weight;
            held[r] += a.kind == Action::forward ? 1 : frees ? -1 : 0;
            res.peak_in_flight[r] = std::max(res.peak_in_flight[r], held[r]);
        }
        if (a.is_compute() || a.is_send()) {
            const double cost = a.is_send() ? costs.send : costs.cost(a);
            if (cost == 0) {  // takes no processor, so it shares none
                finish(r, t, 0);
                continue;
            }
            work[r] = {true, false, t + cost, 1, cost};
            ++working[size_t(pool[size_t(r)])];
            reshare(t);
            continue;
        }
        auto it = arrived.find(message_id(a, r));
        if (it == arrived.end()) {
            blocked[r] = true;  // resumed by the matching send
            waiting[message_id(a, r)] = r;
        } else {
            receive(r, it->second);
        }
    }

    for (int r = 0; r < s.pp; ++r)
        if (pc[r] < s.ranks[r].size()) fail("{}", describe_deadlock(s, pc));

    res.makespan = s.pp > 0 ? *std::max_element(now.begin(), now.end()) : 0;
    double total = 0;
    for (int r = 0; r < s.pp; ++r) {
        res.idle.push_back(res.makespan - res.busy[r]);
        total += res.compute[r];
    }
    res.bubble = res.makespan > 0 ? 1 - total / (s.pp * res.makespan) : 0;
    return res;
}

}  // namespace weft::pipeline
