#pragma once
// The layout search: every combination of degrees (dp, tp, pp, cp; for a mixture of experts, ep
// folded over dp: each ep dividing dp and the experts), micro-batch size, ZeRO
// stage, sequence parallelism, recomputation and pipeline schedule (1F1B, interleaved with each
// vpp that divides the layers) that the fixed choices allow, ranked by predicted step time.
// Candidates that cannot run are counted by reason.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/plan/cost.hpp"

namespace weft::plan {

// Values the user fixed; unset ones are searched.
struct SearchSpace {
    std::optional<int> dp, tp, pp, cp, vpp, zero, ep;
    std::optional<int64_t> micro_batch;
    std::optional<bool> sp;
    std::optional<Recompute> recompute;
    std::optional<ScheduleKind> schedule;
    CpKind cp_kind = CpKind::ring;    // how cp > 1 splits attention
    int cp_ulysses = 0;               // hybrid: the Ulysses group's size
    std::string pp_layers;            // uneven stages ("7,8,8,7"); needs pp fixed
    bool cp_all_gather = false;       // cp by all-gathering K and V (Candidate::cp_all_gather)
    bool ring_bidirectional = false;  // ring: TokenRing
    int devices = 0;               // 0: every device of the cluster (or dp*tp*pp*cp when all fixed)
    int64_t max_micro_batch = 64;  // largest micro-batch tried when not fixed
};

// Why `k` cannot run `w` (a short reason such as "indivisible: heads % tp"; the detail names the
// numbers), or nullopt when it can. Memory is not checked here.
struct Rejection {
    std::string reason, detail;
};
std::optional<Rejection> check_candidate(const Workload& w, const Candidate& k);

struct SearchResult {
    int world = 0;
    std::vector<Estimate> best;              // fitting, fastest first (at most `top`)
    std::optional<Estimate> best_unfitting;  // the fastest that ran out of memory
    int64_t considered = 0, fitting = 0;
    std::map<std::string, std::pair<int64_t, std::string>> rejected;  // reason -> count, example
    int64_t rejected_total() const;
};

SearchResult search(const Workload& w, const Cluster& c, const SearchSpace& space, int top);

}  // namespace weft::plan
