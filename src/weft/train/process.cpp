#include "weft/train/process.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/gemm_peak.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::train {

double job_peak_gflops(comm::Mesh& mesh, double per_rank, double seconds) {
    if (per_rank > 0) return per_rank * mesh.world_size();
    // MFU is against the peak of the precision the matrix products run in.
    const bool bf16 = kernels::matmul_precision() == kernels::MatmulPrecision::bf16;
    double peak = kernels::measure_best_peak(bf16, seconds).gflops;
    comm::all_reduce(mesh.group(comm::Axis::world), std::span<double>(&peak, 1));
    return peak;
}

int ranks_on_node() {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return local ? std::max(1, std::atoi(local)) : 1;
}

int node_cores() {
    return std::max(1, int(std::thread::hardware_concurrency()));
}

NodeShare node_share(comm::Mesh& mesh) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        for (int c = 0; c < node_cores(); ++c) CPU_SET(c, &set);
    // Per rank: the host's hash, then its affinity mask.
    constexpr size_t kWords = 1 + sizeof(cpu_set_t) / sizeof(int64_t);
    std::array<int64_t, kWords> mine{};
    mine[0] = int64_t(std::hash<std::string_view>{}(host));
    std::memcpy(&mine[1], &set, sizeof(set));
    comm::Group& world = mesh.group(comm::Axis::world);
    std::vector<int64_t> all(kWords * size_t(world.size()));
    comm::all_gather(world, std::span<const int64_t>(mine), std::span<int64_t>(all));
    NodeShare node{mine[0], 0, 0, -1};
    cpu_set_t cores;
    CPU_ZERO(&cores);
    for (size_t r = 0; r < size_t(world.size()); ++r) {
        if (all[r * kWords] != node.node) continue;
        ++node.ranks;
        cpu_set_t theirs;
        std::memcpy(&theirs, &all[r * kWords + 1], sizeof(theirs));
        CPU_OR(&cores, &cores, &theirs);
    }
    node.cores = std::max(1, CPU_COUNT(&cores));
    if (CPU_COUNT(&set) == 1)
        for (int c = 0; c < CPU_SETSIZE && node.core < 0; ++c)
            if (CPU_ISSET(c, &set)) node.core = c;
    return node;
}

int set_threads_per_rank(int requested) {
    int threads = requested;
    if (threads <= 0) {
        if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) {
            threads = std::atoi(env);
        } else {
            // Ranks on one node share its cores; oversubscribing them with threads costs more
            // than it gains. A rank bound to fewer cores (mpirun binds to one core by default
            // for up to two ranks) gets no more threads than it has cores.
            const int cores = node_cores();
            threads = std::max(1, cores / ranks_on_node());
            cpu_set_t set;
            const int allowed =
                sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : cores;
            if (allowed < threads) {
                // mpirun's default binding, not the user's choice, is the likely cause (a lone
                // rank on this 2-core machine ran at half speed): say so once, from rank 0.
                const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
                if (rank && std::atoi(rank) == 0)
                    fmt::print(stderr,
                               "weft: note: mpirun bound this rank to {} of the node's {} cores, "
                               "so it runs {} thread(s) where it could run {}; pass --bind-to "
                               "none (or --map-by slot:PE={}) to mpirun to give it the cores, "
                               "or --threads to choose\n",
                               allowed, cores, allowed, threads, threads);
                threads = allowed;
            }
        }
    }
    omp_set_num_threads(threads);
    return threads;
}

int attempt_from_env() {
    const char* env = std::getenv("WEFT_ATTEMPT");
    if (!env || !*env) return 0;
    int attempt = -1;
    char extra = 0;
    WEFT_CHECK(std::sscanf(env, "%d%c", &attempt, &extra) == 1 && attempt >= 0,
               "WEFT_ATTEMPT='{}': expected a whole number >= 0 (weft run sets it)", env);
    return attempt;
}

void exit_non_finite_loss(const std::string& message) {
    comm::abort_job(message, kNonFiniteLossExitCode);
}

TestFault TestFault::from_env() {
    TestFault f;
    const char* env = std::getenv("WEFT_TEST_FAULT");
    if (!env || !*env) return f;
    const std::string s = env;
    char kind[8] = {};
    int rank = -1;
    long long step = -1;
    char extra = 0;
    const bool parsed =
        std::sscanf(s.c_str(), "%7[a-z]:%d:%lld%c", kind, &rank, &step, &extra) == 3;
    const std::string k = kind;
    WEFT_CHECK(parsed && (k == "hang" || k == "exit" || k == "kill" || k == "nan") && rank >= 0 &&
                   step >= 1,
               "WEFT_TEST_FAULT='{}': expected <hang|exit|kill|nan>:<rank>:<step> (a testing "
               "aid; see docs/supervisor.md)",
               s);
    // A restart must not meet the fault again, or no supervised run could finish.
    if (attempt_from_env() > 0) return f;
    f.kind_ = k;
    f.rank_ = rank;
    f.step_ = step;
    return f;
}

bool TestFault::fires(int world_rank, int64_t step) const {
    return !kind_.empty() && world_rank == rank_ && step == step_;
}

void TestFault::announce(const char* what, int64_t step) const {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    fmt::print(stderr, "weft: test fault: rank {} {} at step {} (stops at {:.3f})\n", rank_, what,
               step, now);
    std::fflush(stderr);
}

void TestFault::at_step(int world_rank, int64_t step) const {
    if (!fires(world_rank, step) || kind_ == "nan") return;
    if (kind_ == "exit") {
        announce("exits", step);
        std::exit(1);
    }
    if (kind_ == "kill") {
        announce("is killed", step);
        std::raise(SIGKILL);
    }
    announce("hangs", step);
    for (;;) pause();
}

double TestFault::loss(int world_rank, int64_t step, double loss) const {
    if (!fires(world_rank, step) || kind_ != "nan") return loss;
    announce("sees a NaN loss", step);
    return std::nan("");
}

}  // namespace weft::train
