// The supervisor's parts without a training job: reading the supervised command, heartbeats
// and flight-recorder dumps, the fault report's words, and the child process group.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/supervise/child.hpp"
#include "weft/supervise/command.hpp"
#include "weft/supervise/flight.hpp"
#include "weft/supervise/heartbeats.hpp"
#include "weft/supervise/report.hpp"
#include "weft/supervise/supervisor.hpp"

namespace fs = std::filesystem;
using namespace weft::supervise;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("weft_supervise_" + std::to_string(getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) {
    std::ofstream(p) << text;
}

std::string beat(int rank, int64_t step, const std::string& phase, long pid = 1) {
    return "{\"rank\": " + std::to_string(rank) +
           ", \"world_size\": 2, \"step\": " + std::to_string(step) + ", \"phase\": \"" + phase +
           "\", \"time\": 1.5, \"pid\": " + std::to_string(pid) +
           ", \"host\": \"elsewhere\", \"attempt\": 0, \"detail\": \"\"}";
}

// Processes of group `pgid` that have not ended, from /proc/<pid>/stat: "pid (comm) state ppid
// pgrp ...".
int live_in_group(pid_t pgid) {
    for (int tries = 0; tries < 100; ++tries) {  // SIGKILL takes effect soon, not at once
        int live = 0;
        for (const auto& e : fs::directory_iterator("/proc")) {
            const std::string name = e.path().filename().string();
            if (name.find_first_not_of("0123456789") != std::string::npos) continue;
            std::ifstream in(e.path() / "stat");
            std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
            const size_t paren = text.rfind(')');
            if (paren == std::string::npos) continue;
            char state = 0;
            int ppid = 0, pgrp = 0;
            if (std::sscanf(text.c_str() + paren + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
                continue;
            if (pgrp == pgid && state != 'Z' && state != 'X') ++live;
        }
        if (live == 0) return 0;
        usleep(20000);
    }
    return 1;
}

}  // namespace

TEST(Command, FindsOutTimeoutAndResume) {
    TrainCommand c = parse_train_command(
        {"mpirun", "-np", "2", "weft", "train", "--out", "a", "--comm-timeout=7.5", "--out=b"});
    EXPECT_EQ(c.out, "b");  // the last wins, as for weft's own flags
    ASSERT_TRUE(c.comm_timeout);
    EXPECT_DOUBLE_EQ(*c.comm_timeout, 7.5);
    EXPECT_FALSE(c.resume);
    EXPECT_TRUE(parse_train_command({"weft", "train", "--out", "r", "--resume"}).resume);
}

TEST(Command, ClearErrors) {
    EXPECT_THROW(parse_train_command({}), weft::Error);
    try {
        parse_train_command({"weft", "train", "--steps", "3"});
        FAIL();
    } catch (const weft::Error& e) {
        EXPECT_NE(std::string(e.what()).find("has no --out"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_train_command({"weft", "train", "--out"}), weft::Error);
    EXPECT_THROW(parse_train_command({"weft", "--out", "r", "--comm-timeout", "x"}), weft::Error);
}

TEST(Command, AttemptsAfterTheFirstResume) {
    TrainCommand c = parse_train_command({"weft", "train", "--out", "r"});
    EXPECT_EQ(attempt_argv(c, 0, std::nullopt), c.argv);
    std::vector<std::string> want = {"weft",           "train", "--out",   "r",
                                     "--comm-timeout", "2",     "--resume"};
    EXPECT_EQ(attempt_argv(c, 1, 2.0), want);
    c.resume = true;  // given by the user: not twice
    EXPECT_EQ(attempt_argv(c, 3, std::nullopt), c.argv);
}

TEST(Command, FindsTheLaunchedProgram) {
    using Words = std::vector<std::string>;
    EXPECT_EQ(launched_program(Words{"mpirun", "-np", "2", "--oversubscribe", "--mca", "btl",
                                     "self", "-x", "A=1", "--bind-to=none", "weft", "train"}),
              10u);
    EXPECT_EQ(launched_program(Words{"/usr/bin/mpiexec", "-n", "4", "./prog", "-n", "3"}), 3u);
    EXPECT_EQ(launched_program(Words{"srun", "--ntasks=2", "-l", "--", "weft"}), 4u);
    EXPECT_FALSE(launched_program(Words{"weft", "train", "--out", "r"}));
    // Not for certain: an option not known here may take the next word as its value; --wdir
    // moves where a relative program is.
    EXPECT_FALSE(launched_program(Words{"mpirun", "--new-option", "x", "weft"}));
    EXPECT_FALSE(launched_program(Words{"mpirun", "--wdir", "/tmp", "weft"}));
}

TEST(Command, RefusesAProgramThatCannotStart) {
    TempDir t;
    const std::string launcher = (t.path / "mpirun").string(), text = (t.path / "text").string();
    write(launcher, "#!/bin/sh\n");
    write(text, "not a program");
    fs::permissions(launcher, fs::perms::owner_all);
    auto error = [](const std::vector<std::string>& argv) -> std::string {
        try {
            check_programs(argv);
        } catch (const weft::Error& e) {
            return e.what();
        }
        return "";
    };
    EXPECT_EQ(error({launcher, "-np", "1", "sh", "-c", "true"}), "");
    EXPECT_EQ(error({launcher, "-np", "2", "/no/such/program", "--out", "r"}),
              "weft run: cannot run '/no/such/program', the program of `" + launcher +
                  " -np 2 /no/such/program`: no such file");
    EXPECT_NE(error({launcher, "-n", "1", text}).find("'" + text + "'"), std::string::npos);
    EXPECT_NE(error({launcher, "-n", "1", text}).find("not an executable file"), std::string::npos);
    EXPECT_NE(error({launcher, "/"}).find("a directory, not a program"), std::string::npos);
    EXPECT_EQ(error({"no-such-launcher", "--out", "r"}),
              "weft run: cannot run 'no-such-launcher': no such program (not a path to an "
              "executable, nor in $PATH)");
}

TEST(Heartbeats, ParseAndReject) {
    auto b = parse_heartbeat(beat(1, 4, "checkpoint", 77));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->rank, 1);
    EXPECT_EQ(b->step, 4);
    EXPECT_EQ(b->phase, "checkpoint");
    EXPECT_EQ(b->pid, 77);
    EXPECT_FALSE(parse_heartbeat("{\"rank\": 1"));                      // torn
    EXPECT_FALSE(parse_heartbeat("{\"rank\": 3, \"world_size\": 2}"));  // incomplete
    EXPECT_FALSE(parse_heartbeat("[]"));
}

TEST(Heartbeats, StallIsNoProgressForTheTimeout) {
    TempDir t;
    HeartbeatWatch w(t.path, 10, 0);
    w.poll(1);
    EXPECT_TRUE(w.stalled(5).empty());
    EXPECT_EQ(w.stalled(11), std::vector<int>{-1});  // nobody beat since the launch
    write(t.path / "rank_0.json", beat(0, 1, "step"));
    write(t.path / "rank_1.json", beat(1, 1, "step"));
    write(t.path / "ignored.txt", "not a heartbeat");
    w.poll(2);
    EXPECT_EQ(w.world_size(), 2);
    EXPECT_TRUE(w.stalled(11).empty());
    write(t.path / "rank_0.json", beat(0, 2, "step"));
    w.poll(9);
    EXPECT_EQ(w.stalled(13), std::vector<int>{1});  // rank 0 progressed at 9, rank 1 at 2
    write(t.path / "rank_1.json", beat(1, 2, "done"));
    w.poll(14);
    EXPECT_TRUE(w.stalled(18).empty());
    EXPECT_EQ(w.stalled(20), std::vector<int>{0});  // a finished rank never stalls
    EXPECT_TRUE(w.dead().empty());                  // other host: its pids are not ours to judge
    write(t.path / "rank_0.json", beat(0, 2, "nonfinite"));
    w.poll(21);
    EXPECT_EQ(w.non_finite(), std::vector<int>{0});
}

TEST(Heartbeats, EndedProcess) {
    EXPECT_FALSE(process_ended(getpid()));
    Child c({"true"}, {});
    while (!c.poll(0.01)) {
    }
    EXPECT_TRUE(process_ended(c.pid()));
}

TEST(Flight, NamesTheRankThatNeverArrived) {
    std::string entry = R"({"op": "all_reduce", "group": "dp", "seq": 36, "bytes": 64,
                            "peer": -1, "start_s": 1.0, "end_s": 1.1})";
    std::string blocked =
        R"("blocked": {"op": "all_reduce", "group": "dp", "seq": 37, "peer": -1, "bytes": 64})";
    std::vector<FlightDump> dumps;
    for (int r : {0, 2, 3}) {
        auto d = parse_flight_dump("{\"rank\": " + std::to_string(r) + R"(, "reason": "signal", )" +
                                   blocked + ", \"entries\": [" + entry + "]}");
        ASSERT_TRUE(d);
        dumps.push_back(*d);
    }
    auto late = parse_flight_dump(R"({"rank": 1, "reason": "signal", "blocked": null,
                                      "entries": [)" +
                                  entry + "]}");
    ASSERT_TRUE(late);
    dumps.push_back(*late);
    FlightFinding f = analyse_flight(dumps, 5);
    EXPECT_EQ(f.late, std::vector<int>{1});
    EXPECT_NE(f.text.find("rank 1 never reached all_reduce #37 on dp"), std::string::npos)
        << f.text;
    EXPECT_NE(f.text.find("ranks 0, 2, 3 waited in all_reduce #37 on dp"), std::string::npos)
        << f.text;
    EXPECT_NE(f.text.find("rank 4 left no flight dump"), std::string::npos) << f.text;
}

TEST(Flight, NothingBlockedNamesNobody) {
    auto d = parse_flight_dump(R"({"rank": 0, "reason": "signal", "blocked": null,
                                   "entries": []})");
    ASSERT_TRUE(d);
    FlightFinding f = analyse_flight({*d}, 1);
    EXPECT_TRUE(f.text.empty());
    EXPECT_TRUE(f.late.empty());
    EXPECT_FALSE(parse_flight_dump(R"({"rank": 0, "blocked": {"op": 3}})"));
}

TEST(Flight, ReadsADirectory) {
    TempDir t;
    write(t.path / "rank_1.json", R"({"rank": 1, "reason": "timeout", "blocked": null,
                                      "entries": []})");
    write(t.path / "rank_0.json", "{torn");
    auto dumps = read_flight_dumps(t.path);
    ASSERT_EQ(dumps.size(), 1u);
    EXPECT_EQ(dumps[0].rank, 1);
    EXPECT_TRUE(read_flight_dumps(t.path / "absent").empty());
}

TEST(Report, WatchdogMessageAndLine) {
    const std::string err =
        "noise\nweft: rank 0 of 4: comm watchdog: all_reduce #3 on dp blocked for 2.00 s "
        "(timeout 2 s); missing: rank 1, 3\n  rank 1 (dp 1): no answer\n";
    const std::string msg = find_watchdog_message(err);
    EXPECT_EQ(msg.rfind("comm watchdog: all_reduce #3", 0), 0u) << msg;
    EXPECT_EQ(watchdog_missing_ranks(msg), (std::vector<int>{1, 3}));
    EXPECT_TRUE(watchdog_missing_ranks("nothing").empty());
    EXPECT_EQ(find_launch_failure("----\nmpirun was unable to launch the specified application "
                                  "as it could not access\nor execute an executable:\n"),
              "mpirun was unable to launch the specified application as it could not access");
    EXPECT_EQ(find_launch_failure(err), "");

    Fault f;
    f.attempt = 2;
    f.cause = Cause::hang;
    f.what = "hang: x";
    f.status = ExitStatus{124, 0};
    f.beats[0] = *parse_heartbeat(beat(0, 5, "step"));
    f.beats[1] = *parse_heartbeat(beat(1, 4, "step"));
    EXPECT_EQ(fault_line(f),
              "weft run: attempt 2: hang: x; last step per rank 0:5 1:4; command exit code 124");
    nlohmann::json j = fault_json(f);
    EXPECT_EQ(j["cause"], "hang");
    EXPECT_EQ(j["last_beats"]["1"]["step"], 4);
    TempDir t;
    const fs::path p = write_fault_report(t.path, j, 2);
    EXPECT_EQ(p, t.path / "faults" / "attempt_2.json");
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(p))["attempt"], 2);
}

TEST(Child, StatusEnvironmentAndStderr) {
    Child c({"sh", "-c", "echo to-stderr >&2; exit $WEFT_ATTEMPT"}, {{"WEFT_ATTEMPT", "3"}});
    std::optional<ExitStatus> s;
    while (!(s = c.poll(0.05))) {
    }
    EXPECT_EQ(s->code, 3);
    EXPECT_EQ(s->signal, 0);
    EXPECT_NE(c.stderr_tail().find("to-stderr"), std::string::npos);
    EXPECT_THROW(Child({"/no/such/program"}, {}), weft::Error);
}

TEST(Child, StopEndsTheWholeGroup) {
    // A shell that ignores SIGTERM and a sleeping child of it: both must end.
    const auto t0 = std::chrono::steady_clock::now();
    Child c({"sh", "-c", "trap '' TERM; sleep 100 & wait"}, {});
    c.poll(0.2);
    ExitStatus s = c.stop(0.3);
    EXPECT_EQ(s.signal, 9);
    EXPECT_EQ(s.describe().rfind("killed by signal 9", 0), 0u) << s.describe();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
    // Nothing of the group is left alive (a zombie whose parent died waits for init, which in
    // a container may never reap it).
    EXPECT_EQ(live_in_group(c.pid()), 0);
}

TEST(Child, EndsWithAKilledSupervisor) {
    // A stand-in supervisor, SIGKILLed while its command runs: the command must not outlive it.
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t supervisor = fork();
    ASSERT_GE(supervisor, 0);
    if (supervisor == 0) {
        Child c({"sleep", "1000"}, {});
        const pid_t pid = c.pid();
        if (write(fds[1], &pid, sizeof(pid)) == sizeof(pid)) pause();
        _exit(1);
    }
    pid_t command = 0;
    ASSERT_EQ(read(fds[0], &command, sizeof(command)), ssize_t(sizeof(command)));
    kill(supervisor, SIGKILL);
    waitpid(supervisor, nullptr, 0);
    EXPECT_EQ(live_in_group(command), 0);
    kill(-command, SIGKILL);  // if it failed, not left behind
    close(fds[0]);
    close(fds[1]);
}

TEST(Options, Validate) {
    SuperviseOptions o;
    o.max_restarts = -1;
    EXPECT_THROW(o.validate(), weft::Error);
    o.max_restarts = 0;
    o.heartbeat_timeout = -2;
    EXPECT_THROW(o.validate(), weft::Error);
    EXPECT_GT(heartbeat_margin(300), 15);  // the watchdog's grace and reporter wait fit
    EXPECT_LT(heartbeat_margin(2), 10);
}
