#include "weft/parallel/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {

std::vector<int> rank_chunks(int rank, int pp, int vpp, bool vee) {
    std::vector<int> out;
    for (int c = 0; c < pp * vpp; ++c)
        if (chunk_owner(c, pp, vee) == rank) out.push_back(c);
    return out;
}

std::string_view format_action_kind(Action::Kind kind) {
    switch (kind) {
        case Action::forward:
            return "forward";
        case Action::backward:
            return "backward";
        case Action::send_act:
            return "send_act";
        case Action::recv_act:
            return "recv_act";
        case Action::send_grad:
            return "send_grad";
        case Action::recv_grad:
            return "recv_grad";
        case Action::backward_input:
            return "backward_input";
        case Action::backward_weight:
            return "backward_weight";
    }
    return "?";
}

std::string format_action(const Action& a) {
    std::string s = fmt::format("{} m{} c{}", format_action_kind(a.kind), a.micro, a.chunk);
    if (a.is_send()) s += fmt::format(" to {}", a.peer);
    if (a.is_recv()) s += fmt::format(" from {}", a.peer);
    return s;
}

MessageId message_id(const Action& a, int rank) {
    switch (a.kind) {
        case Action::send_act:
            return {false, a.micro, a.chunk, rank, a.peer};
        case Action::recv_act:
            return {false, a.micro, a.chunk - 1, a.peer, rank};
        case Action::send_grad:
            return {true, a.micro, a.chunk - 1, rank, a.peer};
        case Action::recv_grad:
            return {true, a.micro, a.chunk, a.peer, rank};
        default:
            fail("message_id of '{}': expected a send or recv action", format_action(a));
    }
}

void append_compute(Schedule& s, int r, Action::Kind kind, int micro, int chunk) {
    std::vector<Action>& out = s.ranks[r];
    const int prev = chunk - 1, next = chunk + 1;
    const bool has_prev = prev >= 0 && s.owner(prev) != r;
    const bool has_next = next < s.chunks() && s.owner(next) != r;
    if (kind == Action::forward) {
        if (has_prev) out.push_back({Action::recv_act, micro, chunk, s.owner(prev)});
        out.push_back({Action::forward, micro, chunk, -1});
        if (has_next) out.push_back({Action::send_act, micro, chunk, s.owner(next)});
    } else if (kind == Action::backward_weight) {
        out.push_back({kind, micro, chunk, -1});  // no message needs W
    } else {
        if (has_next) out.push_back({Action::recv_grad, micro, chunk, s.owner(next)});
        out.push_back({kind, micro, chunk, -1});
        if (has_prev) out.push_back({Action::send_grad, micro, chunk, s.owner(prev)});
    }
}

namespace {

void emit(Schedule& s, int r, Action::Kind kind, int micro, int chunk) {
    append_compute(s, r, kind, micro, chunk);
}

// Warm-up forwards, then one forward and one backward in turn, then the remaining backwards:
// the shape shared by 1F1B and interleaved 1F1B. `fwd(k)` / `bwd(k)` map the k-th forward or
// backward of this rank to its (micro, chunk).
template <typename F, typename B>
void emit_1f1b(Schedule& s, int r, int total, int warmup, F fwd, B bwd) {
    auto forward = [&](int k) {
        auto [micro, chunk] = fwd(k);
        emit(s, r, Action::forward, micro, chunk);
    };
    auto backward = [&](int k) {
        auto [micro, chunk] = bwd(k);
        emit(s, r, Action::backward, micro, chunk);
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
        forward(warmup + k);
        backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
}

// The most (micro-batch, chunk) pairs a schedule holds.
constexpr int64_t kMaxSchedulePairs = int64_t(1) << 20;

}  // namespace

Schedule make_schedule(ScheduleKind kind, int pp, int vpp, int micro_batches) {
    return make_schedule(kind, pp, vpp, micro_batches, Costs{});
}

Schedule make_schedule(ScheduleKind kind, int pp, int vpp, int micro_batches, const Costs& costs) {
    WEFT_CHECK(pp >= 1, "pipeline parallel size must be at least 1, got pp={}", pp);
    WEFT_CHECK(vpp >= 1, "virtual pipeline size must be at least 1, got vpp={}", vpp);
    WEFT_CHECK(micro_batches >= 1, "micro-batches must be at least 1, got {}", micro_batches);
    // Every (micro-batch, chunk) pair is a forward, a backward and up to four messages, held by
    // the schedule and again by the simulator: pp 10^6 x 10^6 micro-batches exhausted memory.
    const int64_t pairs = int64_t(pp) * vpp * micro_batches;
    WEFT_CHECK(pairs <= kMaxSchedulePairs,
               "pp {} x vpp {} x {} micro-batches = {} (micro-batch, chunk) pairs is past what a "
               "schedule can hold (at most {}); expected fewer pipeline ranks or micro-batches",
               pp, vpp, micro_batches, pairs, kMaxSchedulePairs);
    WEFT_CHECK(kind != ScheduleKind::zb_v || vpp == 2,
               "schedule zb-v runs two chunks per rank in a V, expected vpp=2, got vpp={}", vpp);
    WEFT_CHECK(kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v || vpp == 1,
               "schedule {} has one chunk per rank, expected vpp=1, got vpp={} (use interleaved)",
               format_schedule_kind(kind), vpp);
    if (kind == ScheduleKind::interleaved) {
        WEFT_CHECK(micro_batches >= pp,
                   "interleaved schedule needs at least pp={} micro-batches, got {}", pp,
                   micro_batches);
        WEFT_CHECK(micro_batches % pp == 0,
                   "interleaved schedule needs micro-batches divisible by pp={}, got {}", pp,
                   micro_batches);
    }

    Schedule s{pp, vpp, micro_batches, kind, std::vector<std::vector<Action>>(pp)};
    if (s.split_backward()) {
        fill_zero_bubble(s, costs);
        return s;
    }
    const int m = micro_batches;
    for (int r = 0; r < pp; ++r) {
        auto plain = [r](int k) { return std::pair{k, r}; };
        switch (kind) {
            case ScheduleKind::gpipe:
                for (int k = 0; k < m; ++k) emit(s, r, Action::forward, k, r);
                for (int k = 0; k < m; ++k) emit(s, r, Action::backward, k, r);
                break;
            case ScheduleKind::one_f_one_b:
                // Rank r is pp - r - 1 steps from the last stage: that many forwards fill the
                // pipe before its first gradient can come back.
                emit_1f1b(s, r, m, std::min(pp - r - 1, m), plain, plain);
                break;
            case ScheduleKind::zb_h1:
            case ScheduleKind::zb_v:
                break;  // filled above
            case ScheduleKind::interleaved: {
                // The k-th virtual micro-batch of a rank: blocks of pp micro-batches run through
                // local chunk 0, then local chunk 1, ... before the next block starts.
                auto virt = [pp, vpp, r](int k, bool forward) {
                    const int in_group = k % (pp * vpp);
                    int local = in_group / pp;
                    if (!forward) local = vpp - 1 - local;
                    const int micro = k / (pp * vpp) * pp + in_group % pp;
                    return std::pair{micro, local * pp + r};
                };
                const int total = m * vpp;
                // Megatron: the extra (pp - r - 1) * 2 forwards cover the round trip of the
                // first gradient; (vpp - 1) * pp fill the rank's earlier chunks.
                // Megatron-LM before 2023 made every forward warm-up when m == pp; that holds
                // more activations for the same (exact) bubble, so weft keeps the general rule.
                const int warmup = std::min((pp - r - 1) * 2 + (vpp - 1) * pp, total);
                emit_1f1b(
                    s, r, total, warmup, [&](int k) { return virt(k, true); },
                    [&](int k) { return virt(k, false); });
                break;
            }
        }
    }
    return s;
}

namespace {

// Position of every action of a schedule, for the order checks of validate().
struct Positions {
    // (micro, chunk) -> index on its rank; `backward` is the fused backward or B, `weight` W.
    std::map<std::pair<int, int>, int> forward, backward, weight;
    std::map<MessageId, int> sends, recvs;  // message -> index on its rank
};

Positions index_actions(const Schedule& s) {
    Positions p;
    for (int r = 0; r < s.pp; ++r) {
        for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
            const Action& a = s.ranks[r][i];
            const auto where = [&] { return fmt::format("rank {} action {}", r, i); };
            WEFT_CHECK(a.micro >= 0 && a.micro < s.micro_batches,
                       "{} ({}): micro-batch must be in [0, {}), got {}", where(), format_action(a),
                       s.micro_batches, a.micro);
            WEFT_CHECK(a.chunk >= 0 && a.chunk < s.chunks(),
                       "{} ({}): chunk must be in [0, {}), got {}", where(), format_action(a),
                       s.chunks(), a.chunk);
            WEFT_CHECK(s.owner(a.chunk) == r, "{} ({}): chunk {} belongs to rank {}, not {}",
                       where(), format_action(a), a.chunk, s.owner(a.chunk), r);
            const std::pair key{a.micro, a.chunk};
            if (a.is_compute()) {
                const bool split =
                    a.kind == Action::backward_input || a.kind == Action::backward_weight;
                WEFT_CHECK(split == s.split_backward() || a.kind == Action::forward,
                           "{} ({}): schedule {} expected {}", where(), format_action(a),
                           format_schedule_kind(s.kind),
                           s.split_backward() ? "backward_input and backward_weight"
                                              : "one fused backward");
                auto& seen = a.kind == Action::forward           ? p.forward
                             : a.kind == Action::backward_weight ? p.weight
                                                                 : p.backward;
                WEFT_CHECK(seen.emplace(key, i).second, "{} ({}): expected one {}, found another",
                           where(), format_action(a), format_action_kind(a.kind));
                continue;
            }
            WEFT_CHECK(a.peer >= 0 && a.peer < s.pp && a.peer != r,
                       "{} ({}): peer must be another rank in [0, {}), got {}", where(),
                       format_action(a), s.pp, a.peer);
            const bool to_prev = a.kind == Action::recv_act || a.kind == Action::send_grad;
            const int neighbour = a.chunk + (to_prev ? -1 : 1);
            WEFT_CHECK(neighbour >= 0 && neighbour < s.chunks() && s.owner(neighbour) == a.peer,
                       "{} ({}): expected the peer to hold chunk {}, which {}", where(),
                       format_action(a), neighbour,
                       neighbour >= 0 && neighbour < s.chunks()
                           ? fmt::format("is on rank {}", s.owner(neighbour))
                           : std::string("does not exist"));
            auto& seen = a.is_send() ? p.sends : p.recvs;
            WEFT_CHECK(seen.emplace(message_id(a, r), i).second, "{} ({}): message is {} twice",
                       where(), format_action(a), a.is_send() ? "sent" : "received");
        }
    }
    return p;
}

}  // namespace

void validate(const Schedule& s) {
    WEFT_CHECK(s.pp >= 1 && s.vpp >= 1 && s.micro_batches >= 1,
               "schedule sizes must be at least 1, got pp={} vpp={} micro_batches={}", s.pp, s.vpp,
               s.micro_batches);
    WEFT_CHECK(static_cast<int>(s.ranks.size()) == s.pp,
               "schedule has action lists for {} ranks, expected pp={}", s.ranks.size(), s.pp);
    const Positions p = index_actions(s);

    // Each required message must be sent after its producer and received before its consumer;
    // the same-rank hand-overs must be in program order instead.
    std::set<MessageId> linked;
    auto link = [&](bool grad, int micro, int from_chunk, int to_chunk, int from_pos, int to_pos) {
        const int src = s.owner(from_chunk), dst = s.owner(to_chunk);
        const std::string what =
            fmt::format("{} of micro-batch {} from chunk {} to chunk {}",
                        grad ? "gradient" : "activation", micro, from_chunk, to_chunk);
        if (src == dst) {
            WEFT_CHECK(from_pos < to_pos,
                       "rank {}: {} is consumed (action {}) before produced ({})", src, what,
                       to_pos, from_pos);
            return;
        }
        const MessageId id{grad, micro, std::min(from_chunk, to_chunk), src, dst};
        auto send = p.sends.find(id);
        auto recv = p.recvs.find(id);
        WEFT_CHECK(send != p.sends.end(), "rank {}: {} is never sent to rank {}", src, what, dst);
        WEFT_CHECK(recv != p.recvs.end(), "rank {}: {} is never received from rank {}", dst, what,
                   src);
        WEFT_CHECK(send->second > from_pos, "rank {}: {} is sent (action {}) before computed ({})",
                   src, what, send->second, from_pos);
        WEFT_CHECK(recv->second < to_pos, "rank {}: {} is received (action {}) after used ({})",
                   dst, what, recv->second, to_pos);
        linked.insert(id);
    };

    for (int micro = 0; micro < s.micro_batches; ++micro) {
        for (int c = 0; c < s.chunks(); ++c) {
            WEFT_CHECK(p.forward.contains({micro, c}),
                       "rank {}: missing forward of micro-batch {} chunk {}", s.owner(c), micro, c);
            WEFT_CHECK(p.backward.contains({micro, c}),
                       "rank {}: missing backward of micro-batch {} chunk {}", s.owner(c), micro,
                       c);
        }
    }
    for (int micro = 0; micro < s.micro_batches; ++micro) {
        for (int c = 0; c < s.chunks(); ++c) {
            const int f = p.forward.at({micro, c}), b = p.backward.at({micro, c});
            WEFT_CHECK(f < b,
                       "rank {}: backward of micro-batch {} chunk {} (action {}) precedes its "
                       "forward (action {})",
                       s.owner(c), micro, c, b, f);
            if (s.split_backward()) {
                // W after its B, and both in micro-batch order on the chunk: the gradients
                // then accumulate in the order of the fused schedules (bitwise the same).
                const auto w = p.weight.find({micro, c});
                WEFT_CHECK(w != p.weight.end(),
                           "rank {}: missing backward_weight of micro-batch {} chunk {}",
                           s.owner(c), micro, c);
                WEFT_CHECK(b < w->second,
                           "rank {}: backward_weight of micro-batch {} chunk {} (action {}) "
                           "precedes its backward_input (action {})",
                           s.owner(c), micro, c, w->second, b);
                if (micro > 0) {
                    WEFT_CHECK(p.backward.at({micro - 1, c}) < b &&
                                   p.weight.at({micro - 1, c}) < w->second,
                               "rank {}: chunk {}'s backward of micro-batch {} runs before that "
                               "of micro-batch {}: expected B and W in micro-batch order",
                               s.owner(c), c, micro, micro - 1);
                }
            }
            if (c + 1 < s.chunks()) {
                link(false, micro, c, c + 1, f, p.forward.at({micro, c + 1}));
                link(true, micro, c + 1, c, p.backward.at({micro, c + 1}), b);
            }
        }
    }
    for (const auto* seen : {&p.sends, &p.recvs}) {
        for (const auto& [id, pos] : *seen) {
            const int rank = seen == &p.sends ? id.src : id.dst;
            WEFT_CHECK(linked.contains(id),
                       "rank {} action {} ({}): no compute needs this message, expected only the "
                       "messages between chunks on different ranks",
                       rank, pos, format_action(s.ranks[rank][pos]));
        }
    }
}

}  // namespace weft::pipeline
