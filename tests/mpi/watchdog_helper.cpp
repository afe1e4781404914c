// A job in which one rank misbehaves, for expect_failure.sh: mpi_watchdog_helper <mode> <timeout>
//   sleep     (dp = world) the last rank stops responding before all_reduce #3 on dp
//   sleep0    the same with rank 0, so that another rank must report
//   exit      the last rank calls exit(1) there
//   kill      the last rank SIGKILLs itself there
//   p2p       (pp = 2) rank 0 receives 4096 B from rank 1, which stops responding
//   deadlock  (pp = 2) both ranks receive from each other
//   desync    (tp = 2) rank 1 calls all_gather on tp while the others all_reduce on world
// The misbehaving rank prints "stops at <unix time>" so the script can time the detection.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"

using namespace weft::comm;

namespace {

void mark_stop(int rank) {
    double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    fmt::print(stderr, "helper: rank {} stops at {:.3f}\n", rank, now);
    std::fflush(stderr);
}

[[noreturn]] void hang() {
    for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
    MpiEnv env(&argc, &argv);
    if (argc != 3) abort_job("usage: mpi_watchdog_helper <mode> <timeout seconds>");
    const std::string mode = argv[1];
    const int me = env.rank(), last = env.size() - 1;
    weft::Layout layout;
    if (mode == "p2p" || mode == "deadlock") layout.pp = 2;
    if (mode == "desync") layout.tp = 2;
    MeshOptions options;
    options.timeout_s = std::atof(argv[2]);
    Mesh mesh(layout, options);
    std::vector<float> x(1024, 1.0f);

    if (mode == "sleep" || mode == "sleep0" || mode == "exit" || mode == "kill") {
        const int bad = mode == "sleep0" ? 0 : last;
        for (int step = 0; step < 6; ++step) {
            if (step == 3 && me == bad) {
                mark_stop(me);
                if (mode == "exit") std::exit(1);
                if (mode == "kill") std::raise(SIGKILL);
                hang();
            }
            all_reduce(mesh.group(Axis::dp), std::span(x));
        }
    } else if (mode == "p2p") {
        if (me == 1) mark_stop(me), hang();
        recv(mesh.group(Axis::pp), std::span(x), 1);
    } else if (mode == "deadlock") {
        if (me == 0) mark_stop(me);
        recv(mesh.group(Axis::pp), std::span(x), 1 - mesh.rank(Axis::pp));
    } else if (mode == "desync") {
        if (me == 1) {
            mark_stop(me);
            std::vector<float> out(2 * x.size());
            all_gather(mesh.group(Axis::tp), std::span<const float>(x), std::span(out));
        } else {
            all_reduce(mesh.group(Axis::world), std::span(x));
        }
    } else {
        abort_job(
            fmt::format("unknown mode '{}', expected sleep, sleep0, exit, kill, p2p, deadlock or "
                        "desync",
                        mode));
    }
    fmt::print("helper: rank {} finished without the expected failure\n", me);
    return 0;
}
