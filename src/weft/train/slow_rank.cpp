#include "weft/train/slow_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"

namespace weft::train {

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + mid, v.end());
    const double upper = v[mid];
    if (v.size() % 2 == 1) return upper;
    return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + mid));
}

}  // namespace

nlohmann::json SlowRank::to_json() const {
    return {{"event", "slow_rank"},
            {"step", last_step},
            {"rank", rank},
            {"peers", peers},
            {"first_step", first_step},
            {"last_step", last_step},
            {"steps", steps},
            {"steps_late", steps_late},
            {"median_lateness_s", median_lateness_s},
            {"threshold_s", threshold_s}};
}

std::string SlowRank::describe(const std::string& coords) const {
    return fmt::format(
        "slow rank: rank {} ({}) arrived last at its peers' collectives in {} of {} steps ({}-{}), "
        "a median {:.1f} ms after them (threshold {:.1f} ms)",
        rank, coords, steps_late, steps, first_step, last_step, 1e3 * median_lateness_s,
        1e3 * threshold_s);
}

std::optional<SlowRank> find_slow_rank(std::span<const StepWaits> steps, std::span<const int> peers,
                                       const SlowRankRule& rule) {
    if (peers.size() < 2 || int64_t(steps.size()) < std::max<int64_t>(rule.min_steps, 1))
        return std::nullopt;
    for (const StepWaits& s : steps) {
        for (int r : peers) {
            WEFT_CHECK(r >= 0 && size_t(r) < s.blocked_s.size(),
                       "slow-rank diagnosis: step {} has waits of {} ranks, rank {} is not one",
                       s.step, s.blocked_s.size(), r);
        }
    }
    // Who waited least, step by step; the candidate is the rank that did so most often.
    std::vector<int64_t> least(peers.size(), 0);
    for (const StepWaits& s : steps) {
        size_t best = 0;
        for (size_t i = 1; i < peers.size(); ++i) {
            if (s.blocked_s[peers[i]] < s.blocked_s[peers[best]]) best = i;
        }
        ++least[best];
    }
    const size_t c = size_t(std::max_element(least.begin(), least.end()) - least.begin());
    const int64_t n = int64_t(steps.size());
    if (double(least[c]) < rule.min_late_fraction * double(n)) return std::nullopt;  // cheap out

    // Its lateness in each step: how much longer the typical peer waited than it did.
    std::vector<double> lateness, step_s, others;
    std::vector<bool> waited_least;
    for (const StepWaits& s : steps) {
        others.clear();
        bool least_here = true;
        for (size_t i = 0; i < peers.size(); ++i) {
            if (i == c) continue;
            others.push_back(s.blocked_s[peers[i]] - s.blocked_s[peers[c]]);
            least_here = least_here && s.blocked_s[peers[i]] > s.blocked_s[peers[c]];
        }
        lateness.push_back(median(others));
        waited_least.push_back(least_here);
        step_s.push_back(s.step_s);
    }
    const double med = median(lateness);
    std::vector<double> deviation;
    for (double l : lateness) deviation.push_back(std::abs(l - med));
    const double threshold = std::max({rule.min_lateness_s, rule.min_step_fraction * median(step_s),
                                       rule.noise_factor * median(deviation)});
    // Late by the margin step by step, not only on the median: a rank a little behind in every
    // step with a few large spikes (a busier core) has a median near the threshold but few steps
    // above it; an injected or real fault is above it in nearly every step.
    int64_t late = 0;
    for (size_t s = 0; s < lateness.size(); ++s) late += waited_least[s] && lateness[s] > threshold;
    if (double(late) < rule.min_late_fraction * double(n)) return std::nullopt;

    SlowRank out;
    out.rank = peers[c];
    out.peers.assign(peers.begin(), peers.end());
    out.first_step = steps.front().step;
    out.last_step = steps.back().step;
    out.steps = n;
    out.steps_late = late;
    out.median_lateness_s = med;
    out.threshold_s = threshold;
    return out;
}

std::vector<std::vector<int>> stage_peers(int world_size, int pp) {
    WEFT_CHECK(pp >= 1 && world_size % pp == 0,
               "slow-rank diagnosis: {} ranks do not split into {} pipeline stages", world_size,
               pp);
    const int per_stage = world_size / pp;
    std::vector<std::vector<int>> out(pp);
    for (int r = 0; r < world_size; ++r) out[r / per_stage].push_back(r);
    return out;
}

SlowRankMonitor::SlowRankMonitor(std::vector<std::vector<int>> peer_sets, int64_t window,
                                 SlowRankRule rule)
    : peer_sets_(std::move(peer_sets)), window_(window), rule_(rule) {}

std::vector<SlowRank> SlowRankMonitor::add(StepWaits step) {
    if (!warm_) {
        warm_ = true;
        return {};
    }
    steps_.push_back(std::move(step));
    if (int64_t(steps_.size()) < window_) return {};
    return judge();
}

std::vector<SlowRank> SlowRankMonitor::finish() {
    return judge();
}

std::vector<SlowRank> SlowRankMonitor::judge() {
    std::vector<SlowRank> out;
    for (const auto& peers : peer_sets_) {
        if (auto s = find_slow_rank(steps_, peers, rule_)) out.push_back(std::move(*s));
    }
    steps_.clear();
    return out;
}

}  // namespace weft::train
