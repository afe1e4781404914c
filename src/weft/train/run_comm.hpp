#pragma once
// A run's communication as it reports it: each step's counters and the share of ZeRO's
// reductions hidden behind compute (fields of the step's metrics line), the slow-rank diagnosis
// over every rank's blocked time, and the whole run's summary at the end. Setup, evaluation and
// checkpoints count in the run's total, not in a step's. Collective where it says so.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "weft/comm/mesh.hpp"
#include "weft/parallel/inflight.hpp"
#include "weft/train/comm_report.hpp"
#include "weft/train/run_log.hpp"
#include "weft/train/slow_rank.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

class RunComm {
  public:
    RunComm(comm::Mesh& mesh, TrainState& st, RunLog& log);

    // Before a step: what came since the last step joins the run's total only.
    void begin_step();
    // After it: the step's counters, as fields of its metrics line (none for one process).
    nlohmann::json step_fields();
    // Then, collective over the world: every rank's blocked time in the step, gathered for the
    // slow-rank diagnosis (reported when a window of steps closes).
    void gather_waits(int64_t step, double step_s);
    // The slow ranks over the last, unfinished window (collective-free).
    void finish_steps();
    // The run's communication: a "summary" metrics line and a table on the console.
    void summary(int64_t steps);

  private:
    void report(const std::vector<SlowRank>& named);

    comm::Mesh& mesh_;
    TrainState& st_;
    RunLog& log_;
    CommReport report_;
    parallel::OverlapTimes overlap_total_;
    SlowRankMonitor slow_ranks_;
    double blocked0_ = 0;
};

}  // namespace weft::train
