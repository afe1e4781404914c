#pragma once
// What a training process takes from its launcher and its machine: OpenMP threads per rank, the
// job's peak for MFU, and a fault to inject for tests of the failure paths.
#include <cstdint>
#include <string>

namespace weft::comm {
class Mesh;
}

namespace weft::train {

// The job's GEMM peak in GFLOP/s (of the matmul precision), for MFU: `per_rank` times the ranks
// when it is positive, else the sum of what every rank measures with its own threads
// (kernels::measure_best_peak, about `seconds` per size). Collective over the world.
double job_peak_gflops(comm::Mesh& mesh, double per_rank, double seconds);

// Ranks of this job on this node (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 without mpirun).
int ranks_on_node();
// Cores of the node (at least 1).
int node_cores();

// This rank's node as the job uses it.
struct NodeShare {
    int64_t node = 0;  // the same on every rank of the node (a hash of its host name)
    int ranks = 1;     // the job's ranks on it
    int cores = 1;     // the cores those ranks may run on: the union of their affinity masks
    int core = -1;     // the one core this rank may run on (mpirun --bind-to core); -1: more
};
// Collective over the world.
NodeShare node_share(comm::Mesh& mesh);

// OpenMP threads for this rank: `requested` if positive, else $OMP_NUM_THREADS if set, else
// max(1, cores of the node / ranks on the node) (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 rank
// without mpirun), at most the cores the rank may run on (rank 0 notes on stderr when mpirun's
// binding left it fewer). Applies it with omp_set_num_threads and returns it.
int set_threads_per_rank(int requested);

// The attempt of a supervised run (`weft run` sets WEFT_ATTEMPT=<k>, from 0); 0 when unset. A
// malformed value is an error naming it.
int attempt_from_env();

// Exit code of a rank that met a non-finite loss, so that a supervisor can tell a divergence from
// a crash (1 is any weft::Error, 124 the comm watchdog).
inline constexpr int kNonFiniteLossExitCode = 3;

// Ends the job after a non-finite loss: prints `message` and exits (MPI_Abort with several ranks)
// with kNonFiniteLossExitCode. At once, even if every rank prints it: a rank that waited might let
// another commit a checkpoint of the diverged state.
[[noreturn]] void exit_non_finite_loss(const std::string& message);

// A testing aid: WEFT_TEST_FAULT=<kind>:<rank>:<step> makes world rank <rank> misbehave at
// optimizer step <step> (1-based, as metrics.jsonl counts): hang sleeps forever, exit calls
// exit(1), kill raises SIGKILL on itself, nan makes that step's loss NaN on that rank. Each prints
// "weft: test fault: rank R <hangs|exits|is killed|sees a NaN loss> at step S (stops at <unix
// time>)" first. Faults fire only on a supervised run's first attempt (WEFT_ATTEMPT unset or 0),
// so that a restart does not meet them again. Unset: no fault. A malformed value is an error
// naming it.
class TestFault {
  public:
    static TestFault from_env();
    // hang, exit and kill, at the start of a step.
    void at_step(int world_rank, int64_t step) const;
    // nan: the loss the trainer sees for this step.
    double loss(int world_rank, int64_t step, double loss) const;

  private:
    bool fires(int world_rank, int64_t step) const;
    void announce(const char* what, int64_t step) const;

    std::string kind_;  // "", "hang", "exit", "kill" or "nan"
    int rank_ = -1;
    int64_t step_ = -1;
};

}  // namespace weft::train
