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
    // The CPU time of the executing thread over the record (the action's own work, which a core
    // shared with other ranks stretches in wall time but not here); negative: not measured.
    double cpu_us = -1;
};

// One complete ("ph": "X") event per record with pid = tid = rank (args.cpu_us when measured), plus
// one process_name and one thread_name metadata ("ph": "M") event per rank that appears, so
// Perfetto shows "rank r".
nlohmann::json chrome_trace(const std::vector<TraceRecord>& records);

// One record per action of the timeline (a recv spans the time its rank waited for the message),
// plus an "idle" record from a rank's last action to the makespan when that is positive.
// `us_per_unit` converts simulation time to microseconds: 1e6 for costs in seconds; the default
// shows a unit cost as one millisecond.
std::vector<TraceRecord> trace_records(const SimResult& r, double us_per_unit = 1000);
nlohmann::json chrome_trace(const SimResult& r, double us_per_unit = 1000);

// Each chunk's forward, backward (B + W) and W time from measured records (a "forward m3 c5"
// style name; a fused backward has W 0), as the mean, or the median (robust to the first
// micro-batch's allocations and to another process taking the core); chunks without records
// cost 0. What the zero-bubble schedules are generated for. From the records' CPU times instead
// of their wall durations with `cpu` (every compute record must carry one).
Costs measured_costs(int chunks, const std::vector<TraceRecord>& records, bool median,
                     bool cpu = false);

}  // namespace weft::pipeline
