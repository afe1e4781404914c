#include "weft/supervise/supervisor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "weft/core/error.hpp"
#include "weft/supervise/child.hpp"
#include "weft/supervise/command.hpp"
#include "weft/supervise/elastic.hpp"
#include "weft/supervise/flight.hpp"
#include "weft/supervise/heartbeats.hpp"
#include "weft/supervise/report.hpp"

namespace weft::supervise {

namespace fs = std::filesystem;

namespace {

// Exit codes that a restart cannot cure when nothing has run yet: a bad input (1), an internal
// error (2), a command-line error (CLI11's 105-109), a program that is not executable (126) or
// not found (127).
bool is_startup_error(int code) {
    return code == 1 || code == 2 || (code >= 105 && code <= 109) || code == 126 || code == 127;
}

constexpr int kNonFiniteExit = 3;   // weft::train::kNonFiniteLossExitCode
constexpr int kWatchdogExit = 124;  // weft::comm::kWatchdogExitCode

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
    g_stop_signal = sig;
}

double clock_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double unix_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double default_comm_timeout() {
    if (const char* env = std::getenv("WEFT_COMM_TIMEOUT"); env && std::atof(env) > 0)
        return std::atof(env);
    return 300;
}

// What `latest` names, for the report: the checkpoint the next attempt will resume from.
std::string latest_checkpoint(const fs::path& run) {
    std::ifstream in(run / "checkpoints" / "latest");
    std::string name;
    std::getline(in, name);
    return name.empty() ? "" : (fs::path("checkpoints") / name).string();
}

// Removes an earlier attempt's heartbeats or flight dumps, which would read as this one's. Not
// recreated: their writers make them, after the run's inputs are validated, so a command that
// fails on bad input leaves nothing behind.
void clear_dir(const fs::path& dir) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    WEFT_CHECK(!ec, "weft run: cannot clear {}: {}", dir.string(), ec.message());
}

struct Attempt {
    bool finished = false;
    bool startup_error = false;  // failed before any rank beat, with a code a restart cannot cure
    int exit_code = 0;
    Fault fault;
};

struct Watch {
    const SuperviseOptions& o;
    const TrainCommand& cmd;
    std::optional<double> add_timeout;
    double hb_timeout;
};

// The step a resumed attempt starts from: that of the checkpoint `latest` names (0 if none).
int64_t resume_step(const fs::path& run) {
    const std::string name = latest_checkpoint(run);
    const size_t at = name.rfind("step_");
    return at == std::string::npos ? 0 : std::atoll(name.c_str() + at + 5);
}

// `on_first_step` is called with the first beat of a step this attempt has finished.
Attempt run_attempt(const Watch& w, int attempt,
                    const std::function<void(const RankBeat&)>& on_first_step) {
    const fs::path run = w.cmd.out;
    clear_dir(run / "heartbeat");
    clear_dir(run / "flight");
    const std::vector<std::string> argv = attempt_argv(w.cmd, attempt, w.add_timeout);
    fmt::print(stderr, "weft run: attempt {}: {}\n", attempt, fmt::join(argv, " "));
    const int64_t first_step = (attempt > 0 || w.cmd.resume ? resume_step(run) : 0) + 1;
    const double start = clock_s();
    Child child(argv, {{"WEFT_ATTEMPT", std::to_string(attempt)}});
    HeartbeatWatch hb(run / "heartbeat", w.hb_timeout, start);

    Attempt a;
    Fault& f = a.fault;
    f.attempt = attempt;
    std::optional<ExitStatus> status;
    std::vector<int> dead, stalled;
    double dead_since = 0, first_sign_unix = 0;
    bool stop = false, stepped = false;
    for (;;) {
        status = child.poll(w.o.poll);
        const double now = clock_s();
        hb.poll(now);
        for (const auto& [r, b] : hb.beats()) {
            // A beat's step counts the steps finished, in every phase but nonfinite. A short
            // attempt may go from its first step to checkpoint or done between two polls.
            const bool finished = b.phase == "step" || b.phase == "checkpoint" ||
                                  b.phase == "eval" || b.phase == "done";
            if (stepped || !finished || b.step < first_step) continue;
            stepped = true;
            on_first_step(b);
        }
        if (g_stop_signal) break;
        if (status) break;
        if (!hb.non_finite().empty()) {
            // The rank ends the job itself; give it the time it takes to say why.
            if (dead_since == 0) dead_since = now, first_sign_unix = unix_s();
            if (now - dead_since > 5) break;
            continue;
        }
        if (dead.empty()) dead = hb.dead();
        if (!dead.empty()) {
            // The launcher notices too and ends the job with the rank's status; wait briefly
            // for that status, then end the job ourselves (a launcher that does not notice).
            if (dead_since == 0) dead_since = now, first_sign_unix = unix_s();
            if (now - dead_since > std::min(5.0, w.o.grace)) {
                stop = true;
                break;
            }
            continue;
        }
        stalled = hb.stalled(now);
        if (!stalled.empty()) {
            stop = true;
            break;
        }
    }
    f.detected_unix = first_sign_unix > 0 ? first_sign_unix : unix_s();
    if (g_stop_signal) {
        fmt::print(stderr, "weft run: stopping the job on signal {}\n", int(g_stop_signal));
        child.stop(w.o.grace);
        a.exit_code = 128 + g_stop_signal;
        return a;
    }
    if (status && status->code == 0) {
        a.finished = true;
        return a;
    }
    // Stopping the job also makes the ranks' flight recorders dump (SIGTERM).
    if (stop || !status) {
        child.stop(w.o.grace);
    } else {
        child.stop(std::min(2.0, w.o.grace));  // the command ended; reap any rank it left
    }
    if (status) f.status = status;
    hb.poll(clock_s());
    f.beats = hb.beats();
    f.watchdog = find_watchdog_message(child.stderr_tail());
    f.flight = analyse_flight(read_flight_dumps(run / "flight"), hb.world_size());
    f.resume_from = latest_checkpoint(run);
    double last_beat = 0;
    for (const auto& [r, b] : f.beats) last_beat = std::max(last_beat, b.time);

    const std::vector<int> nonfinite = hb.non_finite();
    if (!nonfinite.empty() || (status && status->code == kNonFiniteExit)) {
        f.cause = Cause::non_finite;
        f.ranks = nonfinite;
        std::string where;
        for (int r : nonfinite) where += fmt::format("; rank {}: {}", r, f.beats.at(r).detail);
        f.what = fmt::format("non-finite loss{}{}",
                             nonfinite.empty() ? "" : " on " + ranks_text(nonfinite), where);
    } else if (status && status->code == kWatchdogExit) {
        // The watchdog names who did not arrive; the flight dumps, when present, say it too.
        f.cause = Cause::hang;
        f.ranks = f.flight.late.empty() ? watchdog_missing_ranks(f.watchdog) : f.flight.late;
        f.what = "hang: the comm watchdog ended the job (exit 124)";
        if (!f.ranks.empty()) f.what += fmt::format(" naming {}", ranks_text(f.ranks));
        if (!f.watchdog.empty()) f.what += " (" + f.watchdog + ")";
    } else if (!dead.empty()) {
        f.cause = Cause::exit;
        f.ranks = dead;
        f.what = fmt::format("{} ended (process gone) after step {}", ranks_text(dead),
                             f.beats.at(dead.front()).step);
    } else if (!stalled.empty()) {
        f.cause = Cause::hang;
        f.ranks = f.flight.late.empty() ? stalled : f.flight.late;
        if (stalled.front() < 0) {
            f.ranks.clear();
            f.what = fmt::format("hang: no rank wrote a heartbeat within {:.1f} s of the launch",
                                 w.hb_timeout);
        } else {
            f.what = fmt::format("hang: no heartbeat progress for {:.1f} s from {}", w.hb_timeout,
                                 ranks_text(stalled));
        }
    } else {
        f.cause = Cause::exit;
        f.what = fmt::format("the command ended ({})", status->describe());
        // A launcher that could not start its program exits with a code of its own (Open MPI:
        // 132), but says so; a restart would meet the same.
        const std::string launch = find_launch_failure(child.stderr_tail());
        if (!launch.empty()) f.what += ": " + launch;
        a.startup_error = f.beats.empty() && (is_startup_error(status->code) || !launch.empty());
    }
    // From the last sign of life to the supervisor seeing the fault.
    if (last_beat > 0) f.latency_s = std::max(0.0, f.detected_unix - last_beat);
    a.exit_code = status ? status->shell_code() : kWatchdogExit;
    if (a.exit_code == 0) a.exit_code = 1;
    return a;
}

}  // namespace

void SuperviseOptions::validate() const {
    WEFT_CHECK(max_restarts >= 0, "weft run --max-restarts {}: expected a whole number >= 0",
               max_restarts);
    WEFT_CHECK(comm_timeout >= 0 && std::isfinite(comm_timeout),
               "weft run --comm-timeout {}: expected seconds >= 0 (0: the default)", comm_timeout);
    WEFT_CHECK(heartbeat_timeout >= 0 && std::isfinite(heartbeat_timeout),
               "weft run --heartbeat-timeout {}: expected seconds >= 0 (0: the comm timeout plus "
               "a margin)",
               heartbeat_timeout);
    WEFT_CHECK(grace >= 0 && std::isfinite(grace), "weft run --grace {}: expected seconds >= 0",
               grace);
    WEFT_CHECK(min_ranks >= 0, "weft run --min-ranks {}: expected a whole number >= 0", min_ranks);
    WEFT_CHECK(elastic || min_ranks == 0,
               "weft run --min-ranks {} without --elastic: only an elastic restart changes the "
               "number of ranks",
               min_ranks);
}

double heartbeat_margin(double comm_timeout) {
    const double watchdog_grace = std::clamp(comm_timeout / 4, 0.5, 5.0);
    return 3 * watchdog_grace + 5;
}

int supervise(const SuperviseOptions& o, const std::vector<std::string>& command) {
    o.validate();
    TrainCommand cmd = parse_train_command(command);
    check_programs(cmd.argv);
    // --elastic changes the world through the launcher's rank count: without one it could not.
    std::optional<RankCount> rank_count;
    int world = 0;
    if (o.elastic) {
        rank_count = find_rank_count(cmd.argv);
        WEFT_CHECK(rank_count,
                   "weft run --elastic: the command '{}' has no launcher rank count; expected "
                   "`mpirun -np N` (or -n N, --np N), which an elastic restart rewrites",
                   fmt::join(cmd.argv, " "));
        world = rank_count->ranks;
        WEFT_CHECK(o.min_ranks <= world,
                   "weft run --min-ranks {}: larger than the command's world of {} rank(s); "
                   "expected at most {}",
                   o.min_ranks, world, world);
    }
    const std::vector<std::string> base_argv = cmd.argv;
    std::optional<double> add_timeout;
    double comm_timeout = default_comm_timeout();
    if (o.comm_timeout > 0) {
        WEFT_CHECK(!cmd.comm_timeout || *cmd.comm_timeout == o.comm_timeout,
                   "weft run --comm-timeout {} but the command says --comm-timeout {}; give it "
                   "once",
                   o.comm_timeout, *cmd.comm_timeout);
        if (!cmd.comm_timeout) add_timeout = o.comm_timeout;
        comm_timeout = o.comm_timeout;
    } else if (cmd.comm_timeout && *cmd.comm_timeout > 0) {
        comm_timeout = *cmd.comm_timeout;
    }
    const double hb_timeout = o.heartbeat_timeout > 0
                                  ? o.heartbeat_timeout
                                  : comm_timeout + heartbeat_margin(comm_timeout);
    const Watch w{o, cmd, add_timeout, hb_timeout};

    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);

    // The last fault's report, completed with the restarted attempt's first step (the time to
    // recover, docs/supervisor.md).
    nlohmann::json last_report;
    auto on_first_step = [&](const RankBeat& b) {
        if (last_report.is_null()) return;
        const double detected = last_report["detected_at"].get<double>();
        last_report["recovery"] = {{"first_step", b.step},
                                   {"first_step_at", b.time},
                                   {"seconds_after_detection", b.time - detected}};
        write_fault_report(cmd.out, last_report, last_report["attempt"].get<int>());
        fmt::print(stderr,
                   "weft run: attempt {} finished step {} {:.2f} s after the fault was detected\n",
                   last_report["attempt"].get<int>() + 1, b.step, b.time - detected);
    };
    for (int attempt = 0;; ++attempt) {
        Attempt a = run_attempt(w, attempt, on_first_step);
        if (g_stop_signal) return a.exit_code;
        if (a.finished) {
            fmt::print(stderr, "weft run: the run finished on attempt {} ({} restart(s))\n",
                       attempt, attempt);
            return 0;
        }
        Fault& f = a.fault;
        bool restart = !a.startup_error && attempt < o.max_restarts;
        // A fault that names lost ranks restarts on those left (a non-finite loss names none).
        std::optional<ElasticPlan> plan;
        std::string elastic_refused;
        // A fault naming every rank (a hang seen by heartbeats alone stalls them all) says
        // nothing of which are lost: the same world restarts.
        std::set<int> named;
        for (int r : f.ranks)
            if (r >= 0 && r < world) named.insert(r);
        if (restart && o.elastic && f.cause != Cause::non_finite && !named.empty() &&
            int(named.size()) < world) {
            try {
                if (const std::optional<SavedLayout> saved = read_saved_layout(cmd.out)) {
                    plan = plan_elastic(*saved, world, f.ranks, o.min_ranks);
                    elastic_refused = plan->refused;
                } else {
                    elastic_refused =
                        "no committed checkpoint to read the layout and batch settings from";
                }
            } catch (const Error& e) {
                elastic_refused = e.what();
            }
            restart = elastic_refused.empty();
        }
        nlohmann::json report = fault_json(f);
        report["restarting"] = restart;
        if (plan) report["elastic"] = plan->to_json();
        if (!elastic_refused.empty()) report["elastic_refused"] = elastic_refused;
        // A command that failed before training started gets no report file: it touched
        // nothing, and neither does weft run.
        std::string line = fault_line(f);
        if (!a.startup_error)
            line += " (report: " + write_fault_report(cmd.out, report, attempt).string() + ")";
        if (a.startup_error) {
            line +=
                "; not restarting: the command failed before training started, and would "
                "again";
        } else if (!elastic_refused.empty()) {
            line +=
                "; giving up: --elastic finds no layout for the next attempt: " + elastic_refused;
        } else if (restart) {
            line += fmt::format("; restarting from {} (restart {} of at most {})",
                                f.resume_from.empty() ? "the start" : f.resume_from, attempt + 1,
                                o.max_restarts);
            if (plan) line += "; elastic: " + plan->describe();
        } else {
            line += fmt::format("; giving up: {} restart(s) used of --max-restarts {}", attempt,
                                o.max_restarts);
        }
        fmt::print(stderr, "{}\n", line);
        if (!restart) {
            fmt::print(stderr, "weft run: failed: {}\n", f.what);
            return a.exit_code;
        }
        if (plan) {
            world = plan->new_world;
            cmd.argv = with_rank_count(base_argv, *rank_count, world);
            for (const std::string& w : elastic_flags(*plan)) cmd.argv.push_back(w);
        }
        last_report = report;
    }
}

}  // namespace weft::supervise
