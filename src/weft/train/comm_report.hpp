#pragma once
// Communication as a run reports it: per-step snapshots of the mesh's counters added up, and the
// groups that talk to other ranks, as CommStats::to_json() writes them.
#include <nlohmann/json.hpp>

#include "weft/comm/mesh.hpp"
#include "weft/parallel/inflight.hpp"

namespace weft::train {

class CommReport {
  public:
    explicit CommReport(comm::Mesh& mesh) : mesh_(mesh) {}
    // Returns the counters since the last take (and resets the mesh's), adding them to the total.
    comm::CommStats take();
    const comm::CommStats& total() const { return total_; }
    // The groups of more than one rank.
    static comm::CommStats talking(const comm::CommStats& s);
    // Groups of more than one rank only: {"dp": {...}} (empty when the run is one process).
    static nlohmann::json to_json(const comm::CommStats& s);
    // The fields a metrics line gets: {"comm": ..., "comm_hidden", "comm_outstanding_s",
    // "comm_blocked_s"}.
    static nlohmann::json fields(const comm::CommStats& s, const parallel::OverlapTimes& t);

  private:
    comm::Mesh& mesh_;
    comm::CommStats total_;
};

}  // namespace weft::train
