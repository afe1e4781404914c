#pragma once
// The fault report of one failed attempt: RUN/faults/attempt_<k>.json and one line for a human.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "weft/supervise/child.hpp"
#include "weft/supervise/flight.hpp"
#include "weft/supervise/heartbeats.hpp"

namespace weft::supervise {

enum class Cause { exit, hang, non_finite };
const char* cause_name(Cause cause);  // "exit", "hang", "nonfinite"

struct Fault {
    int attempt = 0;
    Cause cause = Cause::exit;
    std::vector<int> ranks;            // the ranks at fault, when known
    std::string what;                  // the cause in words, naming the ranks
    std::optional<ExitStatus> status;  // the command's, if it ended by itself
    std::map<int, RankBeat> beats;     // each rank's last heartbeat
    FlightFinding flight;
    std::string watchdog;      // the comm watchdog's message, if the command printed one
    double detected_unix = 0;  // when the supervisor saw the fault
    double latency_s = -1;     // from the ranks' last beat to detection (exits and hangs)
    std::string resume_from;   // the checkpoint the next attempt resumes from, or "" (start)
};

nlohmann::json fault_json(const Fault& fault);
// "weft run: attempt 0: rank 1 ended (killed by signal 9) at step 3; last step per rank: 0:3
// 1:2; command: exit code 137; flight recorder: ..."
std::string fault_line(const Fault& fault);
// Writes RUN/faults/attempt_<k>.json (temporary file, then rename); returns its path.
std::filesystem::path write_fault_report(const std::filesystem::path& run_dir,
                                         const nlohmann::json& report, int attempt);

// The comm watchdog's message in a command's stderr ("comm watchdog: ... missing: rank 3"), its
// first line only; "" if there is none.
std::string find_watchdog_message(const std::string& stderr_text);
// The launcher's line, in a command's stderr, saying it could not start the program (Open MPI:
// "... was unable to launch the specified application ...", MPICH: "execvp error on file",
// Slurm: "execve(): ..."); "" if there is none.
std::string find_launch_failure(const std::string& stderr_text);
// The ranks after "missing: rank " in a watchdog message ("missing: rank 1, 3" -> {1, 3}).
std::vector<int> watchdog_missing_ranks(const std::string& message);

}  // namespace weft::supervise
