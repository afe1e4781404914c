#include "weft/comm/mpi_env.hpp"

#include <fmt/format.h>
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated C++ bindings, whose
// symbols live in libmpi_cxx, which MPI::MPI_C does not link.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "weft/core/error.hpp"

namespace weft::comm {

namespace {

bool mpi_live() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

// A process started without a launcher is a world of one: Open MPI then forks a daemon (orted)
// for it and probes UCX, about 0.3 s of every `weft train` without mpirun, most of a small
// run. Neither serves one rank, so unless the user chose otherwise it starts isolated, on ob1.
void prefer_fast_singleton() {
    for (const char* launched : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
        if (std::getenv(launched) != nullptr) return;
    }
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
    setenv("OMPI_MCA_pml", "ob1", /*overwrite=*/0);
}

// The deferred MpiEnv of this process, started by ensure_mpi().
MpiEnv* deferred_env = nullptr;

}  // namespace

MpiEnv::MpiEnv(int* argc, char*** argv) {
    start(argc, argv);
}

MpiEnv::MpiEnv(Deferred) {
    deferred_env = this;
}

void ensure_mpi() {
    if (mpi_live()) return;
    WEFT_CHECK(deferred_env != nullptr, "MPI is not initialised and no MpiEnv was made");
    deferred_env->start(nullptr, nullptr);
}

void MpiEnv::start(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
        MPI_Query_thread(&thread_level_);
    } else {
        prefer_fast_singleton();
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &thread_level_);
        owns_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    WEFT_CHECK(thread_level_ >= MPI_THREAD_FUNNELED,
               "MPI granted thread level {}, expected at least MPI_THREAD_FUNNELED ({})",
               thread_level_, MPI_THREAD_FUNNELED);
}

MpiEnv::~MpiEnv() {
    if (deferred_env == this) deferred_env = nullptr;
    if (!owns_ || !mpi_live()) return;
    if (std::uncaught_exceptions() > 0 && size_ > 1) {
        abort_job("unwinding an exception past MpiEnv; aborting the job so no rank waits for us");
    }
    MPI_Finalize();
}

bool under_mpirun() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
        if (std::getenv(var) != nullptr) return true;
    }
    return false;
}

int world_rank() {
    int rank = 0;
    if (mpi_live()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int world_size() {
    int size = 1;
    if (mpi_live()) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

void abort_job(std::string_view message, int exit_code) {
    // One write per message so that lines of different ranks do not interleave mid-line.
    std::string line =
        fmt::format("weft: rank {} of {}: {}\n", world_rank(), world_size(), message);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
    std::fflush(stdout);
    if (mpi_live()) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::exit(exit_code);
}

}  // namespace weft::comm
