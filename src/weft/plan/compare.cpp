#include "weft/plan/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace weft::plan {

namespace {

std::vector<std::pair<std::string, double>> terms(const Estimate& e) {
    // The collectives and p2p run inside the pipeline's chain; what is left of the pipeline
    // after them and the bubble is the compute.
    const double bubble = e.pipeline_s * e.bubble;
    const double compute =
        e.pipeline_s - bubble - e.tp_comm_s - e.cp_comm_s - e.ep_comm_s - e.pp_comm_s;
    return {{"compute", compute},
            {"bubble", bubble},
            {"tp comm", e.tp_comm_s},
            {"cp comm", e.cp_comm_s},
            {"ep comm", e.ep_comm_s},
            {"p2p", e.pp_comm_s},
            {"dp exposed", e.dp_exposed_s},
            {"optimizer", e.offloaded ? 0 : e.optimizer_s},
            {"offload exposed", e.offload_exposed_s}};
}

std::string secs(double s) {
    return std::abs(s) >= 1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3);
}

}  // namespace

std::vector<TermDiff> step_differences(const Estimate& best, const Estimate& other,
                                       double min_share) {
    const auto a = terms(best), b = terms(other);
    std::vector<TermDiff> out;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::abs(a[i].second - b[i].second) >= min_share * best.step_s)
            out.push_back({a[i].first, a[i].second, b[i].second});
    std::stable_sort(out.begin(), out.end(), [](const TermDiff& x, const TermDiff& y) {
        return std::abs(x.best - x.other) > std::abs(y.best - y.other);
    });
    return out;
}

std::string why_text(const Estimate& best, const Estimate& other) {
    const std::vector<TermDiff> d = step_differences(best, other);
    std::string s =
        fmt::format("why 1 over 2: step {} against {}", secs(best.step_s), secs(other.step_s));
    if (d.empty()) {
        // The search ranks by step, then by memory: say which of the two decided.
        const double gib = (other.memory.total() - best.memory.total()) / (1 << 30);
        if (best.step_s < other.step_s)
            return s + fmt::format(" (no part of the step differs by 0.5% or more; {} faster)\n",
                                   secs(other.step_s - best.step_s));
        if (gib > 0)
            return s + fmt::format(
                           " (the same step; {:.2f} GiB less memory a device, the search's "
                           "tie-break)\n",
                           gib);
        return s + " (the same step and memory: a tie, in the search's order)\n";
    }
    s += "; ";
    for (size_t i = 0; i < d.size(); ++i)
        s += fmt::format("{}{} {} against {} ({}{})", i ? ", " : "", d[i].term, secs(d[i].best),
                         secs(d[i].other), d[i].best < d[i].other ? "-" : "+",
                         secs(std::abs(d[i].best - d[i].other)));
    const double mb = (best.memory.total() - other.memory.total()) / (1 << 30);
    if (std::abs(mb) >= 0.05) s += fmt::format("; memory {:+.1f} GiB", mb);
    return s + "\n";
}

}  // namespace weft::plan
