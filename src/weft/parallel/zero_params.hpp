#pragma once
// ZeRO-3 parameters: each rank keeps its slice of every unit; a unit is all-gathered into a
// temporary just before it is used and freed when the model releases it. With expert
// parallelism a unit's expert part is gathered over the expert-data-parallel group, the rest
// over dp (zero_layout.hpp): one gather per part.
//
// Forward uses units 0, 1, ..., L+1 and backward L+1, ..., 1 (the embedding backward needs no
// weights; the tied head uses unit 0 at the end of forward, which stays gathered from the
// embedding until then). begin_phase posts the phase's first unit; acquiring the unit the phase
// expects next posts the one after it (non-blocking), so its gather overlaps this unit's compute.
// Gathers never reach across an optimizer step: the trainer begins each phase.
#include <cstdint>
#include <optional>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/parallel/buffer_pool.hpp"
#include "weft/parallel/inflight.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {

class ParamGatherer {
  public:
    // `edp`: the group expert parts are gathered over (expert parallelism), else null. The
    // gathered units' buffers come from `pool`.
    ParamGatherer(const ZeroLayout& z, comm::Group& dp, InFlight& inflight, BufferPool& pool,
                  const float* shard, comm::Group* edp = nullptr);

    void begin_phase(bool forward);
    float* acquire(int unit);
    void release(int unit);

  private:
    void post(int unit);

    const ZeroLayout& z_;
    comm::Group& dp_;
    comm::Group* edp_;
    InFlight& inflight_;
    BufferPool& pool_;
    const float* shard_;
    std::vector<Buffer> full_;
    std::vector<std::vector<uint64_t>> tickets_;  // per unit: its parts' gathers in flight
    std::vector<int> order_;
    size_t cursor_ = 0;
};

}  // namespace weft::parallel
