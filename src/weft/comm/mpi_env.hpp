#pragma once
// Process-wide MPI lifetime. One MpiEnv lives in main(); everything else in weft::comm calls
// ensure_mpi() first or assumes MPI is initialised. The same binary runs as a plain process (MPI
// singleton, world size 1) and under mpirun.
#include <string_view>

namespace weft::comm {

class MpiEnv {
  public:
    // MPI_Init_thread asking for MPI_THREAD_FUNNELED: only the main thread talks to MPI (OpenMP
    // threads compute, never communicate). Throws weft::Error if the library offers less.
    // If MPI is already initialised (a host program did it), adopts it and will not finalise.
    explicit MpiEnv(int* argc = nullptr, char*** argv = nullptr);
    // Deferred: MPI starts at the first ensure_mpi(), if any. For a plain process, whose MPI
    // singleton start costs about 0.35 s (Open MPI spawns its orted helper), a cost that `--help`,
    // a refused flag, `plan`, `prepare` or `sample` (which never communicate) should not pay.
    struct Deferred {};
    explicit MpiEnv(Deferred);
    // MPI_Finalize. When destroyed while an exception unwinds in a job of several ranks it calls
    // MPI_Abort instead: the other ranks would otherwise wait for this one until their watchdog
    // fires (or forever, inside MPI_Finalize's fence).
    ~MpiEnv();
    MpiEnv(const MpiEnv&) = delete;
    MpiEnv& operator=(const MpiEnv&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    int thread_level() const { return thread_level_; }  // the MPI_THREAD_* level granted

  private:
    friend void ensure_mpi();
    void start(int* argc, char*** argv);

    bool owns_ = false;
    int rank_ = 0;
    int size_ = 1;
    int thread_level_ = 0;
};

// Starts MPI if the process's MpiEnv was deferred and MPI is not running yet; a no-op otherwise.
// Throws weft::Error if there is no MpiEnv and MPI is not initialised.
void ensure_mpi();

// True when started by mpirun/mpiexec (Open MPI, MPICH/Hydra or a PMIx launcher), judged from the
// launcher's environment, so it can be asked before MPI is initialised.
bool under_mpirun();

// Rank and size in MPI_COMM_WORLD; 0 and 1 when MPI is not (or no longer) initialised.
int world_rank();
int world_size();

// Prints "weft: rank R of N: <message>" to stderr and ends the whole job with exit_code: MPI_Abort
// while MPI is live, std::exit otherwise. Use it for errors one rank cannot recover from alone.
[[noreturn]] void abort_job(std::string_view message, int exit_code = 1);

}  // namespace weft::comm
