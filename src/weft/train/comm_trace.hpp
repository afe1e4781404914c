#pragma once
// The measured communication timeline of one step, for runs without a pipeline (--trace): every
// rank's operations of that step from its flight recorder (comm/flight_recorder.hpp: which
// group, what operation, bytes, the peer of a send or receive, start and end), beside a slice
// for the step itself, as one Chrome-trace JSON file that Perfetto opens (one track per rank).
// The gaps between operations are compute: a ring's sends and receives running beside its
// attention show as slices overlapping nothing else on the track.
#include <filesystem>

#include "weft/comm/mesh.hpp"

namespace weft::train {

// Collective over the world group; world rank 0 writes `path` (atomically). `from_s` and `to_s`
// bound the step on this rank's flight-recorder clock (FlightRecorder::now_s()); each track's
// times count from its own step start, since the ranks' clocks need not agree. The recorder keeps
// its last kFlightEntries operations: a step that makes more shows only its latest ones, and
// the file says how many were dropped. Returns the operations this rank put in the file.
int write_comm_trace(comm::Mesh& mesh, double from_s, double to_s,
                     const std::filesystem::path& path);

}  // namespace weft::train
