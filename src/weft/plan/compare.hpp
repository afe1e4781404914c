#pragma once
// Why one layout beat another: the parts of their step times side by side, the largest
// difference first, so that `weft plan` can say what its choice wins on and what it pays.
#include <string>
#include <vector>

#include "weft/plan/cost.hpp"

namespace weft::plan {

struct TermDiff {
    std::string term;            // "bubble", "tp comm", ...
    double best = 0, other = 0;  // seconds per step
};

// The step of each split into compute, pipeline bubble, tp / cp / ep collectives, p2p, exposed
// data-parallel communication and the optimizer (they add up to the step), keeping the terms
// that differ by at least `min_share` of `best`'s step, largest difference first.
std::vector<TermDiff> step_differences(const Estimate& best, const Estimate& other,
                                       double min_share = 0.005);

// "why 1 over 2: ..." for the text report (empty when nothing differs).
std::string why_text(const Estimate& best, const Estimate& other);

}  // namespace weft::plan
