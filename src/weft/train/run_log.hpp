#pragma once
// What a training run tells its user, written by world rank 0 only: the run directory's
// metrics.jsonl, the progress line, and notes (the run's shape at the start, checkpoints,
// evaluations, the end). Every rank holds one; on the others each call does nothing.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "weft/comm/mesh.hpp"
#include "weft/train/batch_split.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/metrics.hpp"
#include "weft/train/options.hpp"
#include "weft/train/run_inputs.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

class RunLog {
  public:
    // World rank 0 creates the run directory (the first file the run writes) and opens its
    // metrics.jsonl, dropping the lines of steps after `start_step` that an interrupted attempt
    // wrote (this run redoes them); the progress line counts from `start_step`.
    RunLog(const TrainOptions& o, const comm::Mesh& mesh, int64_t start_step);
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;

    // The run's shape: model, batch split, layout, memory per rank; and its "start" line.
    void started(const TrainState& st, const RunInputs& in, const BatchSplit& split, int threads,
                 const MemoryEstimate& mem);
    void write(const nlohmann::json& line) { metrics_->write(line); }
    void note(const std::string& line);
    // The progress line of a step, every --log-every steps and at the last.
    void step(int64_t step, double loss, double tokens_per_s, double mfu, double lr);
    void finish_progress();

  private:
    const TrainOptions& o_;
    bool root_;
    std::unique_ptr<MetricsLog> metrics_;
    Progress progress_;
};

}  // namespace weft::train
