#pragma once
// What a training process takes from its launcher and its machine: OpenMP threads per rank, the
// job's peak for MFU, and a fault to inject for tests of the failure paths.
#include <cstdint>
#include <string>

namespace weft::comm {
class Mesh;
}

namespace weft::train {

// The job's fp32 GEMM peak in GFLOP/s, for MFU: `per_rank` times the ranks when it is positive,
// else the sum of what every rank measures with its own threads (an n x n x n product for about
// `seconds`). Collective over the world.
double job_peak_gflops(comm::Mesh& mesh, double per_rank, int64_t n, double seconds);

// OpenMP threads for this rank: `requested` if positive, else $OMP_NUM_THREADS if set, else
// max(1, cores of the node / ranks on the node) (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 rank
// without mpirun), at most the cores the rank may run on. Applies it with omp_set_num_threads
// and returns it.
int set_threads_per_rank(int requested);

// A testing aid: WEFT_TEST_FAULT=hang:<rank>:<step> makes world rank <rank> sleep forever when
// it reaches optimizer step <step> (1-based, as metrics.jsonl counts); exit:<rank>:<step> makes
// it exit(1) there. Both print "weft: test fault: rank R <hangs|exits> at step S (stops at
// <unix time>)" first. Unset: no fault. A malformed value is an error naming it.
class TestFault {
  public:
    static TestFault from_env();
    void at_step(int world_rank, int64_t step) const;

  private:
    std::string kind_;  // "", "hang" or "exit"
    int rank_ = -1;
    int64_t step_ = -1;
};

}  // namespace weft::train
