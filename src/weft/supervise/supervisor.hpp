#pragma once
// `weft run`: starts a training command, watches its ranks' heartbeats, and on a rank's exit, a
// hang or a non-finite loss stops the job, writes a fault report and restarts it from the last
// committed checkpoint, up to a number of times (docs/supervisor.md).
#include <string>
#include <vector>

namespace weft::supervise {

struct SuperviseOptions {
    int max_restarts = 3;
    double comm_timeout = 0;       // 0: the command's --comm-timeout, $WEFT_COMM_TIMEOUT or 300
    double heartbeat_timeout = 0;  // 0: the comm timeout plus heartbeat_margin(comm timeout)
    double grace = 10;             // seconds between SIGTERM and SIGKILL when stopping a job
    double poll = 0.05;            // seconds between looks at the heartbeats
    // After a fault that names lost ranks, restart on the ranks left with a re-planned layout
    // (elastic.hpp); never on fewer than min_ranks (0: no bound).
    bool elastic = false;
    int min_ranks = 0;

    // Every value in range; errors name the flag. Called before any process or file is touched.
    void validate() const;
};

// What a hang needs on top of the comm timeout before the supervisor calls it: the watchdog's
// own grace and reporter wait (docs/comm.md), so it may name the missing rank first, and slack.
double heartbeat_margin(double comm_timeout);

// Runs `command` under supervision; returns the exit code for `weft run`: 0 when an attempt
// finishes, else the last attempt's (124 for a hang the supervisor stopped).
int supervise(const SuperviseOptions& options, const std::vector<std::string>& command);

}  // namespace weft::supervise
