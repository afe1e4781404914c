#include "weft/train/comm_report.hpp"

namespace weft::train {

comm::CommStats CommReport::take() {
    comm::CommStats s = mesh_.stats();
    mesh_.reset_stats();
    if (total_.groups.empty()) {
        total_ = s;
        return s;
    }
    // The mesh's groups keep their order, so snapshots line up group by group.
    for (size_t g = 0; g < s.groups.size() && g < total_.groups.size(); ++g)
        for (size_t op = 0; op < s.groups[g].ops.size(); ++op)
            total_.groups[g].ops[op] += s.groups[g].ops[op];
    return s;
}

comm::CommStats CommReport::talking(const comm::CommStats& s) {
    comm::CommStats out;
    for (const comm::GroupStats& g : s.groups)
        if (g.size > 1) out.groups.push_back(g);
    return out;
}

nlohmann::json CommReport::to_json(const comm::CommStats& s) {
    const comm::CommStats t = talking(s);
    return t.groups.empty() ? nlohmann::json::object() : t.to_json();
}

nlohmann::json CommReport::fields(const comm::CommStats& s, const parallel::OverlapTimes& t) {
    return {{"comm", to_json(s)},
            {"comm_hidden", t.hidden()},
            {"comm_outstanding_s", t.outstanding_s},
            {"comm_blocked_s", t.blocked_s}};
}

}  // namespace weft::train
