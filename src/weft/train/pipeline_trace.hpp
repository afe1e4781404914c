#pragma once
// The measured pipeline timeline of one step, from every rank of world rank 0's pipeline, as one
// Chrome-trace JSON file that Perfetto opens (one track per rank).
#include <filesystem>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::train {

// Collective over the mesh; world rank 0 writes `path` (atomically).
void write_pipeline_trace(comm::Mesh& mesh, const std::vector<pipeline::TraceRecord>& records,
                          const std::filesystem::path& path);

}  // namespace weft::train
