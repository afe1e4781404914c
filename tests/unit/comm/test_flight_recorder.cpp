// The flight recorder without MPI: the ring, the JSON it dumps, and the signal handlers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/comm/flight_recorder.hpp"
#include "weft/comm/flight_signals.hpp"

using namespace weft::comm;
namespace fs = std::filesystem;
using Clock = FlightRecorder::Clock;
using std::chrono::duration_cast;

namespace {

Clock::duration secs(double s) {
    return duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

fs::path scratch(const std::string& name) {
    fs::path p =
        fs::temp_directory_path() / ("weft_flight_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(p);
    fs::create_directories(p);  // the run directory: the recorder makes only its own folder
    return p;
}

nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    EXPECT_TRUE(in.good()) << p;
    return nlohmann::json::parse(in);
}

FlightOp all_reduce_op(uint64_t seq) {
    return {Op::all_reduce, 3, seq, -1, 4096};
}

}  // namespace

TEST(FlightRecorder, RingKeepsTheLastEntriesOldestFirst) {
    FlightRecorder r(2);
    r.name_group(3, "dp");
    const auto t0 = Clock::now();
    const int total = kFlightEntries + 44;
    for (int i = 0; i < total; ++i) {
        uint64_t id = r.begin(all_reduce_op(i), t0 + secs(0.001 * i));
        if (i + 1 < total) r.end(id, t0 + secs(0.001 * i + 0.0005));
    }
    EXPECT_EQ(r.recorded(), uint64_t(total));
    int n = 0;
    auto e = r.entries(&n);
    ASSERT_EQ(n, kFlightEntries);
    EXPECT_EQ(e[0].op.seq, 44u);
    EXPECT_EQ(e[n - 1].op.seq, uint64_t(total - 1));
    EXPECT_LT(e[n - 1].end_s, 0) << "the last operation is still in flight";
    for (int i = 1; i < n; ++i) EXPECT_GT(e[i].start_s, e[i - 1].start_s);
    // An operation the ring has dropped is not finished over a newer one.
    r.end(0, t0 + secs(9));
    e = r.entries(&n);
    for (int i = 0; i < n; ++i) EXPECT_LT(e[i].end_s, 9.0 - 1e-3);
}

TEST(FlightRecorder, JsonHasTheSchemaTheSupervisorReads) {
    fs::path dir = scratch("json");
    const auto t0 = Clock::now();  // before the recorder starts its clock
    FlightRecorder r(5, (dir / "flight").string());
    r.name_group(0, "tp");
    r.name_group(3, "dp");
    r.name_group(7, "a group name much longer than the limit");
    r.end(r.begin(all_reduce_op(0), t0 + secs(1.25)), t0 + secs(1.5));
    r.end(r.begin({Op::send, 0, 0, 4, 64}, t0 + secs(2)), t0 + secs(2.000001));
    r.begin({Op::all_gather, 7, 9, -1, 1 << 20}, t0 + secs(3));
    const FlightOp blocked = all_reduce_op(1);
    r.begin(blocked, t0 + secs(4));
    r.block(blocked, t0 + secs(4));
    ASSERT_TRUE(r.dump_now(FlightReason::signal));
    nlohmann::json j = read_json(dir / "flight" / "rank_5.json");
    EXPECT_EQ(j["rank"], 5);
    EXPECT_EQ(j["reason"], "signal");
    EXPECT_EQ(j["blocked"], nlohmann::json::parse(R"({"op": "all_reduce", "group": "dp",
        "seq": 1, "peer": -1, "bytes": 4096})"));
    ASSERT_EQ(j["entries"].size(), 4u);
    const auto& e = j["entries"];
    EXPECT_EQ(e[0]["op"], "all_reduce");
    EXPECT_EQ(e[0]["group"], "dp");
    EXPECT_EQ(e[0]["seq"], 0);
    EXPECT_EQ(e[0]["bytes"], 4096);
    EXPECT_EQ(e[0]["peer"], -1);
    // Seconds since the recorder started, which was at or after t0.
    const double lag = 1.25 - double(e[0]["start_s"]);
    EXPECT_GE(lag, -1e-5);  // rounded to microseconds
    EXPECT_LT(lag, 0.1);
    EXPECT_NEAR(double(e[0]["end_s"]) - double(e[0]["start_s"]), 0.25, 2e-6);
    EXPECT_EQ(e[1]["op"], "send");
    EXPECT_EQ(e[1]["group"], "tp");
    EXPECT_EQ(e[1]["peer"], 4);
    EXPECT_NEAR(double(e[1]["end_s"]) - double(e[1]["start_s"]), 1e-6, 1.5e-6);
    EXPECT_EQ(e[2]["group"], "a group name much longe");  // cut to 23 characters
    EXPECT_EQ(e[2]["bytes"], 1 << 20);
    EXPECT_TRUE(e[2]["end_s"].is_null());
    EXPECT_TRUE(e[3]["end_s"].is_null());
    for (auto& key : {"op", "group", "seq", "bytes", "peer", "start_s", "end_s"})
        EXPECT_TRUE(e[3].contains(key)) << key;
    EXPECT_EQ(e[3].size(), 7u);
    EXPECT_EQ(j.size(), 4u);
    EXPECT_FALSE(fs::exists(dir / "flight" / "rank_5.json.tmp"));
    fs::remove_all(dir);
}

// A job that fails on bad input is ended by mpirun's SIGTERM before its run directory exists;
// the dump must not create that directory ("nothing is written on bad input").
TEST(FlightRecorder, NeverCreatesTheRunDirectory) {
    fs::path run = scratch("missing");
    fs::remove_all(run);
    FlightRecorder r(0, (run / "flight").string());
    EXPECT_FALSE(r.dump(FlightReason::signal, nullptr));
    EXPECT_FALSE(fs::exists(run));
}

TEST(FlightRecorder, EmptyRingAndNothingBlocked) {
    fs::path dir = scratch("empty");
    FlightRecorder r(0, dir.string());
    ASSERT_TRUE(r.dump(FlightReason::timeout, nullptr));
    nlohmann::json j = read_json(dir / "rank_0.json");
    EXPECT_TRUE(j["blocked"].is_null());
    EXPECT_TRUE(j["entries"].is_array());
    EXPECT_TRUE(j["entries"].empty());
    fs::remove_all(dir);
}

TEST(FlightRecorder, BlockedTimeAddsUpWholeWaits) {
    FlightRecorder r(0);
    const auto t0 = Clock::now();
    r.block(all_reduce_op(0), t0);
    r.unblock(t0 + secs(0.25));
    r.unblock(t0 + secs(5));  // not blocked: nothing to add
    r.block(all_reduce_op(1), t0 + secs(1));
    r.unblock(t0 + secs(1.5));
    EXPECT_NEAR(r.blocked_seconds(), 0.75, 1e-9);
}

TEST(FlightRecorder, WithoutADirectoryNothingIsWritten) {
    FlightRecorder r(0);
    r.begin(all_reduce_op(0), Clock::now());
    EXPECT_FALSE(r.dump(FlightReason::timeout, nullptr));
    EXPECT_TRUE(r.path().empty());
}

TEST(FlightRecorder, ASignalDumpDoesNotReplaceATimeoutDump) {
    fs::path dir = scratch("keep");
    FlightRecorder r(1, dir.string());
    const FlightOp op = all_reduce_op(7);
    r.begin(op, Clock::now());
    ASSERT_TRUE(r.dump(FlightReason::timeout, &op));
    EXPECT_FALSE(r.dump_now(FlightReason::signal));
    EXPECT_EQ(read_json(dir / "rank_1.json")["reason"], "timeout");
    fs::remove_all(dir);
}

TEST(FlightSignals, Sigusr1DumpsAndTheProcessGoesOn) {
    fs::path dir = scratch("usr1");
    FlightRecorder r(3, dir.string());
    r.name_group(3, "dp");
    r.begin(all_reduce_op(0), Clock::now());
    install_flight_signals(r);
    raise(SIGUSR1);
    remove_flight_signals(r);
    nlohmann::json j = read_json(dir / "rank_3.json");
    EXPECT_EQ(j["reason"], "signal");
    EXPECT_EQ(j["entries"].size(), 1u);
    fs::remove_all(dir);
}

TEST(FlightSignals, SigtermDumpsThenEndsTheProcessBySigterm) {
    fs::path dir = scratch("term");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        FlightRecorder r(6, dir.string());
        r.name_group(3, "dp");
        const FlightOp op = all_reduce_op(2);
        r.begin(op, Clock::now());
        r.block(op, Clock::now());
        install_flight_signals(r);
        raise(SIGTERM);
        _exit(0);  // not reached: SIGTERM's default action ends the process
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status)) << "status " << status;
    if (WIFSIGNALED(status)) {
        EXPECT_EQ(WTERMSIG(status), SIGTERM);
    }
    nlohmann::json j = read_json(dir / "rank_6.json");
    EXPECT_EQ(j["reason"], "signal");
    EXPECT_EQ(j["blocked"]["seq"], 2);
    EXPECT_TRUE(j["entries"][0]["end_s"].is_null());
    fs::remove_all(dir);
}
