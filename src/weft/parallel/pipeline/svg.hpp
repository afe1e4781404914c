#pragma once
// Draws a simulated pipeline schedule as a standalone SVG picture: one row per rank, forward and
// backward boxes labelled with their micro-batch (shaded by local chunk when interleaved), idle
// time showing as the grey row background, a time axis, and the bubble in the title.
#include <string>

#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {

// `r` must come from simulate(s, ...). Each rank is a <g class="rank" data-rank="r"> group; each
// box carries a <title> tooltip with its action and times.
std::string schedule_svg(const Schedule& s, const SimResult& r);

}  // namespace weft::pipeline
