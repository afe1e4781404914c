#pragma once
// SIGTERM and SIGINT for a command that stops cleanly (`weft serve` drains): a handler writes the
// signal to a pipe that one thread reads. A handler, not a mask and sigwait, because under
// mpirun MPI's own threads, started before the command could mask anything, take signals too;
// it replaces the comm mesh's flight-recorder handler (dump and die), so construct it after the
// mesh. Restores the previous dispositions when destroyed.
#include <csignal>

namespace weft::cli {

class StopSignals {
  public:
    // `ignore`: the signals do nothing (the ranks of a tensor-parallel server other than 0,
    // which mpirun forwards its signals to: they end when rank 0 says so).
    explicit StopSignals(bool ignore = false);
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    // Blocks until a signal comes (returns it) or wake() is called (returns 0).
    int wait();
    void wake();

  private:
    struct sigaction old_term_ {
    }, old_int_{};
};

}  // namespace weft::cli
