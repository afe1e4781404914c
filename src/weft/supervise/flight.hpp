#pragma once
// Reading the comm flight recorder's dumps (RUN/flight/rank_<r>.json, written by weft::comm on a
// watchdog timeout or on SIGTERM/SIGUSR1) and naming the rank that never reached the collective
// the others waited in. Schema:
//   {"rank": r, "reason": "timeout"|"signal",
//    "blocked": {"op": "all_reduce", "group": "dp", "seq": n, "peer": p|-1, "bytes": b} | null,
//    "entries": [{"op", "group", "seq", "bytes", "peer", "start_s", "end_s"|null}, ...]}
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::supervise {

struct FlightOp {
    std::string op, group;
    int64_t seq = -1, bytes = 0;
    int peer = -1;  // -1: a collective
};

struct FlightDump {
    int rank = -1;
    std::string reason;
    std::optional<FlightOp> blocked;
    std::vector<FlightOp> entries;  // oldest first, as recorded
};

// One dump file's text; nullopt if it does not follow the schema.
std::optional<FlightDump> parse_flight_dump(std::string_view text);
// Every readable rank_<r>.json in `dir` (none if the directory does not exist), by rank.
std::vector<FlightDump> read_flight_dumps(const std::filesystem::path& dir);

struct FlightFinding {
    std::string text;       // "rank 1 never reached all_reduce #37 on dp; ranks 0, 2 waited in it"
    std::vector<int> late;  // the ranks that never reached it
    nlohmann::json json;    // the same, for the fault report
};

// The collective most ranks are blocked in, the dumped ranks whose last collective on that group
// started before it (and are not blocked in communication themselves: they are the cause, not
// waiters), and the ranks of the job (0 .. world_size-1) that left no dump. Empty text when no
// dump shows a rank blocked.
FlightFinding analyse_flight(const std::vector<FlightDump>& dumps, int world_size);

// "rank 3" or "ranks 0, 2": how fault reports name ranks.
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace weft::supervise
