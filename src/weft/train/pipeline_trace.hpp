#pragma once
// The measured pipeline timeline of one step, from every rank of world rank 0's pipeline, as one
// Chrome-trace JSON file that Perfetto opens (one track per rank).
#include <filesystem>
#include <string>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::train {

// The bubble of a measured step against what the simulator predicts from the step's own mean
// forward and backward times per chunk, and against the paper's formula.
struct BubbleReport {
    double measured = 0, simulated = 0, ideal = 0;
    double makespan_s = 0;
    std::string describe() const;
};

// Collective over the mesh; world rank 0 writes `path` (atomically) and returns the bubble of
// its pipeline (other ranks return zeros).
BubbleReport write_pipeline_trace(comm::Mesh& mesh, const pipeline::Schedule& schedule,
                                  const std::vector<pipeline::TraceRecord>& records,
                                  const std::filesystem::path& path);

// From one pipeline's records (rank = pipeline rank): busy time over ranks x makespan, and the
// simulation of `schedule` with the measured mean costs.
BubbleReport measure_bubble(const pipeline::Schedule& schedule,
                            const std::vector<pipeline::TraceRecord>& records);

}  // namespace weft::train
