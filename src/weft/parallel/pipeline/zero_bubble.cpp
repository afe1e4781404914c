// The zero-bubble schedules (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): ZB-H1 and
// ZB-V. The paper draws them by hand for F = B = W and finds others with an ILP; here one greedy
// list scheduler produces both, by running the pipeline at those unit costs and choosing at each
// free moment of a rank, in order: a B that is ready (the critical path: an earlier rank waits
// for its gradient), a forward if the rank holds fewer activations than its limit, the oldest
// ready W (nothing waits for it: it fills what would be idle time). The limit is what bounds
// memory: a (micro-batch, chunk) holds its activations from its forward to its W.
// - zb-h1: one chunk a rank, limit pp micro-batches: the peak of 1F1B (its first rank), so that
//   the run needs no more activation memory. The paper reaches (p - 1)(F + B - 2W), a third of
//   1F1B's bubble, by counting only what B frees against memory; here a micro-batch's whole
//   activations are held until its W, and at that limit the bubble lands between the two (pp 4,
//   8 micro-batches: 1F1B 27%, here 17%, the paper's 11%, which a limit of pp + 2 reaches).
// - zb-v: two chunks a rank in a V, limit 2pp chunks (pp micro-batches of a whole stage, as 1F1B's
//   first rank holds), and forwards of the later chunk first so that B's start early.
// The order found at unit costs runs under any costs (the executor keeps it; simulate() times
// it): an order one timing has run cannot deadlock under another.
#include <climits>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"

namespace weft::pipeline {

void fill_zero_bubble(Schedule& s) {
    WEFT_CHECK(s.split_backward(), "internal: {} is not a zero-bubble schedule",
               format_schedule_kind(s.kind));
    const int pp = s.pp, C = s.chunks(), M = s.micro_batches;
    const bool vee = s.kind == ScheduleKind::zb_v;
    std::vector<std::vector<int>> local(static_cast<size_t>(pp));  // each rank's chunks
    for (int c = 0; c < C; ++c) local[size_t(s.owner(c))].push_back(c);

    // Per chunk: the next micro-batch of each kind, and when each F and B ended.
    std::vector<int> next_f(size_t(C), 0), next_b(size_t(C), 0), next_w(size_t(C), 0);
    std::vector<std::vector<int>> f_end(size_t(C), std::vector<int>(size_t(M), INT_MAX));
    std::vector<std::vector<int>> b_end = f_end;
    std::vector<int> held(size_t(pp), 0), free_at(size_t(pp), 0);
    const int limit = vee ? 2 * pp : pp;

    int64_t left = int64_t(3) * M * C;
    // Every time step runs at least one action of some rank (or the schedule could not finish):
    // a bound on the steps catches a rule that stalls.
    const int64_t max_steps = 3 * left + 2 * int64_t(pp) + 2;
    for (int t = 0; left > 0; ++t) {
        WEFT_CHECK(t < max_steps, "internal: the {} generator stalled at pp={} m={}",
                   format_schedule_kind(s.kind), pp, M);
        for (int r = 0; r < pp; ++r) {
            if (free_at[size_t(r)] > t) continue;
            int kind = -1, chunk = -1;
            // A ready B: the oldest micro-batch, then the later chunk (nearer the loss).
            for (int c : local[size_t(r)]) {
                const int m = next_b[size_t(c)];
                if (m >= M || f_end[size_t(c)][size_t(m)] > t) continue;
                if (c + 1 < C && b_end[size_t(c + 1)][size_t(m)] > t) continue;
                if (chunk < 0 || m < next_b[size_t(chunk)] ||
                    (m == next_b[size_t(chunk)] && c > chunk))
                    kind = Action::backward_input, chunk = c;
            }
            if (chunk < 0 && held[size_t(r)] < limit) {
                // A forward: the later chunk first, then the oldest micro-batch.
                for (int c : local[size_t(r)]) {
                    const int m = next_f[size_t(c)];
                    if (m >= M || (c > 0 && f_end[size_t(c - 1)][size_t(m)] > t)) continue;
                    if (chunk < 0 || c > chunk) kind = Action::forward, chunk = c;
                }
            }
            if (chunk < 0) {
                // The W whose B ended first.
                int best = INT_MAX;
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
            int micro = 0;
            if (kind == Action::forward) {
                micro = next_f[c]++;
                f_end[c][size_t(micro)] = t + 1;
                ++held[size_t(r)];
            } else if (kind == Action::backward_input) {
                micro = next_b[c]++;
                b_end[c][size_t(micro)] = t + 1;

            } else {
                micro = next_w[c]++;
                --held[size_t(r)];
            }
            append_compute(s, r, Action::Kind(kind), micro, chunk);
            free_at[size_t(r)] = t + 1;
            --left;
        }
    }
}

}  // namespace weft::pipeline
