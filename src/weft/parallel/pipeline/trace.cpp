#include "weft/parallel/pipeline/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>

#include "weft/core/error.hpp"

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
        if (rec.cpu_us >= 0) events.back()["args"] = {{"cpu_us", rec.cpu_us}};
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

Costs measured_costs(int chunks, const std::vector<TraceRecord>& records, bool median, bool cpu) {
    // Per chunk and micro-batch: forward, B (or the fused backward) and W.
    std::vector<std::map<int, std::array<double, 3>>> times(static_cast<size_t>(chunks));
    for (const TraceRecord& t : records) {
        const int kind = t.category == "forward"                                      ? 0
                         : t.category == "backward_weight"                            ? 2
                         : t.category == "backward" || t.category == "backward_input" ? 1
                                                                                      : -1;
        if (kind < 0) continue;
        const size_t m = t.name.find(" m"), c = t.name.rfind(" c");
        WEFT_CHECK(m != std::string::npos && c != std::string::npos,
                   "internal: trace record '{}' names no micro-batch and chunk", t.name);
        const int chunk = std::stoi(t.name.substr(c + 2));
        WEFT_CHECK(chunk >= 0 && chunk < chunks, "internal: trace record '{}' of a chunk past {}",
                   t.name, chunks);
        WEFT_CHECK(!cpu || t.cpu_us >= 0, "internal: trace record '{}' has no CPU time", t.name);
        times[size_t(chunk)][std::stoi(t.name.substr(m + 2))][size_t(kind)] +=
            cpu ? t.cpu_us : t.dur_us;
    }
    auto stat = [median](std::vector<double> v) {
        if (v.empty()) return 0.0;
        if (!median) return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
        std::sort(v.begin(), v.end());
        const size_t n = v.size();
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    };
    Costs costs;
    costs.send = costs.latency = 0;
    for (const auto& by_micro : times) {
        std::vector<double> f, b, w;
        for (const auto& [micro, x] : by_micro) {
            f.push_back(x[0]);
            b.push_back(x[1] + x[2]);  // W <= B + W for each micro-batch, so for the statistic
            w.push_back(x[2]);
        }
        costs.chunk_forward.push_back(stat(f));
        costs.chunk_backward.push_back(stat(b));
        costs.chunk_weight.push_back(stat(w));
    }
    return costs;
}

}  // namespace weft::pipeline
