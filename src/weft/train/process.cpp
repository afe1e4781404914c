#include "weft/train/process.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::train {

double job_peak_gflops(comm::Mesh& mesh, double per_rank, int64_t n, double seconds) {
    if (per_rank > 0) return per_rank * mesh.world_size();
    // MFU is against the peak of the precision the matrix products run in.
    double peak = kernels::matmul_precision() == kernels::MatmulPrecision::bf16
                      ? kernels::measure_gemm_peak_bf16_gflops(n, seconds)
                      : kernels::measure_gemm_peak_gflops(n, seconds);
    comm::all_reduce(mesh.group(comm::Axis::world), std::span<double>(&peak, 1));
    return peak;
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
            const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
            const int ranks = local ? std::max(1, std::atoi(local)) : 1;
            threads = std::max(1, int(std::thread::hardware_concurrency()) / ranks);
            cpu_set_t set;
            if (sched_getaffinity(0, sizeof(set), &set) == 0)
                threads = std::min(threads, std::max(1, CPU_COUNT(&set)));
        }
    }
    omp_set_num_threads(threads);
    return threads;
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
    f.kind_ = kind;
    WEFT_CHECK(parsed && (f.kind_ == "hang" || f.kind_ == "exit") && rank >= 0 && step >= 1,
               "WEFT_TEST_FAULT='{}': expected hang:<rank>:<step> or exit:<rank>:<step> (a "
               "testing aid; see docs/data_parallel.md)",
               s);
    f.rank_ = rank;
    f.step_ = step;
    return f;
}

void TestFault::at_step(int world_rank, int64_t step) const {
    if (kind_.empty() || world_rank != rank_ || step != step_) return;
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    fmt::print(stderr, "weft: test fault: rank {} {} at step {} (stops at {:.3f})\n", rank_,
               kind_ == "hang" ? "hangs" : "exits", step, now);
    std::fflush(stderr);
    if (kind_ == "exit") std::exit(1);
    for (;;) pause();
}

}  // namespace weft::train
