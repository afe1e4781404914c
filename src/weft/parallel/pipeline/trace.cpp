#include "weft/parallel/pipeline/trace.hpp"

#include <fmt/format.h>

#include <set>

namespace weft::pipeline {

nlohmann::json chrome_trace(const std::vector<TraceRecord>& records) {
    nlohmann::json events = nlohmann::json::array();
    std::set<int> ranks;
    for (const TraceRecord& rec : records) {
        ranks.insert(rec.rank);
        events.push_back({{"name", rec.name},
                          {"cat", rec.category},
                          {"ph", "X"},
                          {"ts", rec.start_us},
                          {"dur", rec.dur_us},
                          {"pid", rec.rank},
                          {"tid", rec.rank}});
    }
    for (int r : ranks) {
        const std::string label = fmt::format("rank {}", r);
        for (const char* what : {"process_name", "thread_name"})
            events.push_back(
                {{"name", what}, {"ph", "M"}, {"pid", r}, {"tid", r}, {"args", {{"name", label}}}});
    }
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

std::vector<TraceRecord> trace_records(const SimResult& r, double us_per_unit) {
    std::vector<TraceRecord> out;
    for (int rank = 0; rank < static_cast<int>(r.timeline.size()); ++rank) {
        double last = 0;
        for (const TimedAction& t : r.timeline[rank]) {
            const Action& a = t.action;
            const std::string category = a.is_compute() ? std::string(format_action_kind(a.kind))
                                         : a.is_send()  ? "send"
                                                        : "recv";
            out.push_back({rank, format_action(a), category, t.start * us_per_unit,
                           (t.end - t.start) * us_per_unit});
            last = t.end;
        }
        if (r.makespan > last)
            out.push_back(
                {rank, "idle", "idle", last * us_per_unit, (r.makespan - last) * us_per_unit});
    }
    return out;
}

nlohmann::json chrome_trace(const SimResult& r, double us_per_unit) {
    return chrome_trace(trace_records(r, us_per_unit));
}

}  // namespace weft::pipeline
