// main() of every tests/mpi test: initialises MPI, lets rank 0 print the usual gtest output and
// the other ranks only their failures (prefixed with the rank), and makes the job's exit code
// non-zero on every rank when any rank failed, so mpirun reports failure either way.
#include <gtest/gtest.h>
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated C++ bindings, whose
// symbols live in libmpi_cxx, which MPI::MPI_C does not link.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>

#include "weft/comm/mpi_env.hpp"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
  public:
    explicit RankFailurePrinter(int rank) : rank_(rank) {}
    void OnTestPartResult(const testing::TestPartResult& r) override {
        if (!r.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                     r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    }

  private:
    int rank_;
};

}  // namespace

int main(int argc, char** argv) {
    weft::comm::MpiEnv env(&argc, &argv);
    testing::InitGoogleTest(&argc, argv);
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    if (env.rank() != 0) {
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new RankFailurePrinter(env.rank()));
    }
    int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_failed && env.rank() == 0) std::fprintf(stderr, "a rank of %d failed\n", env.size());
    return any_failed;
}
