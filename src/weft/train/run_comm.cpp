#include "weft/train/run_comm.hpp"

#include <fmt/format.h>

#include "weft/comm/collectives.hpp"

namespace weft::train {

RunComm::RunComm(comm::Mesh& mesh, TrainState& st, RunLog& log)
    : mesh_(mesh),
      st_(st),
      log_(log),
      report_(mesh),
      slow_ranks_(stage_peers(mesh.world_size(), mesh.size(comm::Axis::pp))) {}

void RunComm::begin_step() {
    report_.take();
    overlap_total_ += st_.dp().take_overlap_times();
    blocked0_ = mesh_.flight().blocked_seconds();
}

nlohmann::json RunComm::step_fields() {
    const comm::CommStats step_comm = report_.take();
    const parallel::OverlapTimes overlap = st_.dp().take_overlap_times();
    overlap_total_ += overlap;
    if (mesh_.world_size() == 1) return nlohmann::json::object();
    return CommReport::fields(step_comm, overlap);
}

void RunComm::gather_waits(int64_t step, double step_s) {
    if (mesh_.world_size() == 1) return;
    const double blocked = mesh_.flight().blocked_seconds() - blocked0_;
    StepWaits waits{step, step_s, std::vector<double>(size_t(mesh_.world_size()))};
    comm::all_gather(mesh_.group(comm::Axis::world), std::span<const double>(&blocked, 1),
                     std::span(waits.blocked_s));
    report(slow_ranks_.add(std::move(waits)));
}

void RunComm::finish_steps() {
    report(slow_ranks_.finish());
}

void RunComm::report(const std::vector<SlowRank>& named) {
    for (const SlowRank& s : named) {
        log_.write(s.to_json());
        log_.note(s.describe(mesh_.describe_rank(s.rank)));
    }
}

void RunComm::summary(int64_t steps) {
    report_.take();
    overlap_total_ += st_.dp().take_overlap_times();
    if (mesh_.world_size() == 1) return;
    nlohmann::json line = {{"event", "summary"}, {"steps", steps}};
    line.update(CommReport::fields(report_.total(), overlap_total_));
    log_.write(line);
    log_.note(fmt::format(
        "communication of rank 0 over this run (hidden behind compute: {:.0f}%, {:.3f} s blocked "
        "of {:.3f} s outstanding):\n{}",
        100 * overlap_total_.hidden(), overlap_total_.blocked_s, overlap_total_.outstanding_s,
        CommReport::talking(report_.total()).table()));
}

}  // namespace weft::train
