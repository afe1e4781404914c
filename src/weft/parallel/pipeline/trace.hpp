#pragma once
// Chrome-trace JSON (the "traceEvents" format that Perfetto and chrome://tracing open) for
// pipeline timelines. The writer takes plain records so that the executor can emit the same
// format from measured times as the simulator does from costs.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::pipeline {

struct TraceRecord {
    int rank;
    std::string name;  // shown on the slice, e.g. "forward m3 c5"
    std::string
        category;  // forward | backward | backward_input | backward_weight | send | recv | idle
    double start_us, dur_us;
};

// One complete ("ph": "X") event per record with pid = tid = rank, plus one process_name and one
// thread_name metadata ("ph": "M") event per rank that appears, so Perfetto shows "rank r".
nlohmann::json chrome_trace(const std::vector<TraceRecord>& records);

// One record per action of the timeline (a recv spans the time its rank waited for the message),
// plus an "idle" record from a rank's last action to the makespan when that is positive.
// `us_per_unit` converts simulation time to microseconds: 1e6 for costs in seconds; the default
// shows a unit cost as one millisecond.
std::vector<TraceRecord> trace_records(const SimResult& r, double us_per_unit = 1000);
nlohmann::json chrome_trace(const SimResult& r, double us_per_unit = 1000);

}  // namespace weft::pipeline
