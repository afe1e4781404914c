#pragma once
// Slow-rank diagnosis (C4D): a rank that is consistently late to its collectives makes every peer
// wait for it, so per step it is the one that waits least. Each rank measures the seconds it was
// blocked in communication during a step (the flight recorder's blocked time); the trainer gathers
// these per step, and the rule below names a rank only when, in most steps, it waited least and
// its peers waited longer than it by a margin well above the noise. docs/comm.md explains the
// thresholds.
//
// Ranks are compared only with peers that do the same work: the ranks of one pipeline stage (the
// stages differ by design: the last one holds the head and the loss).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft::train {

// docs/comm.md gives the measurements behind these numbers.
struct SlowRankRule {
    int64_t min_steps = 4;                 // compared steps needed before anything is named
    double min_late_fraction = 2.0 / 3.0;  // late by the margin in at least this share of steps
    // The margin on its lateness in a step (the peers' median wait minus its own): at least
    double min_lateness_s = 0.02;    // this (scheduler time slices),
    double min_step_fraction = 0.2;  // this share of the median step time,
    double noise_factor = 3;         // and this many median absolute deviations of its lateness
};

// One step as gathered: every world rank's seconds blocked in communication.
struct StepWaits {
    int64_t step = 0;               // 1-based, as metrics.jsonl counts
    double step_s = 0;              // this step's wall time (on the rank that gathers)
    std::vector<double> blocked_s;  // indexed by world rank
};

struct SlowRank {
    int rank = -1;           // world rank
    std::vector<int> peers;  // the world ranks it was compared with (itself included)
    int64_t first_step = 0, last_step = 0;
    int64_t steps = 0;             // steps compared
    int64_t steps_late = 0;        // steps in which it waited least, late by the margin
    double median_lateness_s = 0;  // median over steps of (the peers' median wait - its wait)
    double threshold_s = 0;        // the margin

    // {"event": "slow_rank", "step", "rank", "peers", "steps", "steps_late",
    //  "median_lateness_s", "threshold_s", "first_step", "last_step"}
    nlohmann::json to_json() const;
    // A line for the progress log; coords describe the rank ("dp 1").
    std::string describe(const std::string& coords) const;
};

// Applies the rule to the ranks `peers` over `steps`. Pure: no MPI, no clock.
std::optional<SlowRank> find_slow_rank(std::span<const StepWaits> steps, std::span<const int> peers,
                                       const SlowRankRule& rule = {});

// World ranks by pipeline stage (pp is the slowest axis of the mesh's rank order).
std::vector<std::vector<int>> stage_peers(int world_size, int pp);

// The trainer's side: collects gathered steps and applies the rule to each stage every `window`
// steps and at the end of the run. The first step given is left out (warm-up: allocations and
// first-touch make it differ from rank to rank for reasons that do not last).
class SlowRankMonitor {
  public:
    SlowRankMonitor(std::vector<std::vector<int>> peer_sets, int64_t window = 50,
                    SlowRankRule rule = {});
    // Adds one step; when a window is full, returns the ranks named over it and starts anew.
    std::vector<SlowRank> add(StepWaits step);
    // The ranks named over the steps since the last window (the run's end).
    std::vector<SlowRank> finish();

  private:
    std::vector<SlowRank> judge();

    std::vector<std::vector<int>> peer_sets_;
    int64_t window_;
    SlowRankRule rule_;
    bool warm_ = false;
    std::vector<StepWaits> steps_;
};

}  // namespace weft::train
