// The flight recorder's dumps in a real job, for flight_dump.sh:
//   flight_helper hang <timeout s> <dir>   (dp = world) the last rank stops before all_reduce #3
//                                          on dp; the others time out in it and dump
//   flight_helper stop <timeout s> <dir>   the same, but the others keep waiting (long timeout)
//                                          until the script sends SIGTERM; rank 0 prints
//                                          "ready" once it waits
//   flight_helper bench <calls>            µs per blocking all_reduce of 16 floats on dp, for
//                                          the recorder's cost (docs/comm.md)
//   flight_helper check <dir> <np> <reason> <stopped rank> <stopped must dump: 0|1>
//                                          (no MPI) reads the dumps and checks them against
//                                          what the job did: exit 0 when right
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"

using namespace weft::comm;

namespace {

constexpr int kCalls = 6, kStop = 3, kFloats = 1024;

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (ok) return;
    fmt::print(stderr, "check: FAIL: {}\n", what);
    ++failures;
}

// The waiting ranks must name all_reduce #kStop on dp as blocked and hold kStop finished
// all-reduces before it, in order; the stopped rank (if it dumped, on the abort's SIGTERM) was in
// no operation and finished #0..#kStop-1.
int check(const std::string& dir, int np, const std::string& reason, int stopped,
          bool stopped_dumps) {
    for (int r = 0; r < np; ++r) {
        const std::string path = fmt::format("{}/rank_{}.json", dir, r);
        std::ifstream in(path);
        if (!in) {
            expect(r == stopped && !stopped_dumps, path + " is missing");
            continue;
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const std::exception& e) {
            expect(false, path + " does not parse: " + e.what());
            continue;
        }
        const bool waiter = r != stopped;
        expect(j.at("rank") == r, path + ": rank");
        expect(j.at("reason") == (waiter ? reason : "signal"), path + ": reason");
        const auto& e = j.at("entries");
        const int finished = kStop + (waiter ? 1 : 0);
        expect(e.size() == size_t(finished), fmt::format("{}: {} entries", path, e.size()));
        double last_start = -1;
        for (size_t i = 0; i < e.size(); ++i) {
            expect(e[i].at("op") == "all_reduce" && e[i].at("group") == "dp" &&
                       e[i].at("seq") == i && e[i].at("peer") == -1 &&
                       e[i].at("bytes") == 4 * kFloats,
                   fmt::format("{}: entry {} is {}", path, i, e[i].dump()));
            const double start = e[i].at("start_s");
            expect(start >= last_start,
                   fmt::format("{}: entry {} starts before the last", path, i));
            last_start = start;
            const bool in_flight = waiter && i + 1 == e.size();
            expect(e[i].at("end_s").is_null() == in_flight,
                   fmt::format("{}: entry {} end_s {}", path, i, e[i].at("end_s").dump()));
            if (!in_flight) expect(double(e[i].at("end_s")) >= start, path + ": end before start");
        }
        if (waiter) {
            const auto& b = j.at("blocked");
            expect(b.is_object() && b.at("op") == "all_reduce" && b.at("group") == "dp" &&
                       b.at("seq") == kStop && b.at("peer") == -1 && b.at("bytes") == 4 * kFloats,
                   path + ": blocked is " + b.dump());
        } else {
            expect(j.at("blocked").is_null(), path + ": the stopped rank names a blocked op");
        }
        fmt::print("check: {}: reason {}, blocked {}, {} entries\n", path,
                   j.at("reason").get<std::string>(), j.at("blocked").dump(), e.size());
    }
    fmt::print("check: {} failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "check" && argc == 7)
        return check(argv[2], std::atoi(argv[3]), argv[4], std::atoi(argv[5]),
                     std::atoi(argv[6]) != 0);
    MpiEnv env(&argc, &argv);
    const int me = env.rank(), last = env.size() - 1;
    if (mode == "bench" && argc == 3) {
        Mesh mesh(weft::Layout{});
        std::vector<float> x(16, 1.0f);
        const int calls = std::atoi(argv[2]);
        for (int i = 0; i < calls / 10; ++i) all_reduce(mesh.group(Axis::dp), std::span(x));
        barrier(mesh.group(Axis::world));
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) all_reduce(mesh.group(Axis::dp), std::span(x));
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (me == 0) fmt::print("bench: {:.3f} us per all_reduce of 16 floats\n", 1e6 * s / calls);
        return 0;
    }
    if ((mode != "hang" && mode != "stop") || argc != 4)
        abort_job("usage: flight_helper hang|stop <timeout s> <dir> | bench <calls> | check ...");
    MeshOptions options;
    options.timeout_s = std::atof(argv[2]);
    options.flight_dir = argv[3];
    Mesh mesh(weft::Layout{}, options);
    std::vector<float> x(kFloats, 1.0f);
    for (int i = 0; i < kCalls; ++i) {
        if (i == kStop && me == last) {
            fmt::print(
                stderr, "helper: rank {} stops at {:.3f}\n", me,
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count());
            std::fflush(stderr);
            for (;;) pause();
        }
        if (i == kStop && me == 0 && mode == "stop") {
            // Posted first, so "ready" means rank 0 is about to wait in #kStop.
            Request r = all_reduce_async(mesh.group(Axis::dp), std::span(x));
            fmt::print("ready\n");
            std::fflush(stdout);
            r.wait();
            continue;
        }
        all_reduce(mesh.group(Axis::dp), std::span(x));
    }
    fmt::print("helper: rank {} finished without the expected failure\n", me);
    return 0;
}
