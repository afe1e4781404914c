#pragma once
// The disk's time in a step of `weft train --offload optimizer|optimizer+params`
// (docs/planner.md, "Offload"): the bytes one rank moves to and from its offload files, from
// the engine profile's counts, at its share of the node's disk, overlapped as the engine
// overlaps them (train::TrainState::step, parallel::WorkingCopy).
#include <cstdint>

#include "weft/plan/cluster.hpp"
#include "weft/plan/memory.hpp"

namespace weft::plan {

// Bytes one rank reads and writes in one step, by the part of the step that moves them.
struct OffloadTraffic {
    // The optimizer's pass (and, at ZeRO 1 over dp > 1 with the copy in files, the gather of
    // the updated slices into it): the master and the optimizer's state read and written
    // once; with the copy in files its gradients read and its weights written.
    double pass_read = 0, pass_written = 0;
    // The gradients' norm, before the pass (copy in files): every gradient record read once.
    double norm_read = 0;
    // The micro-batches (copy in files): weights read before use (forward and backward; the
    // embedding, held from the forward to the backward, once), gradients written behind (and
    // read back from the second micro-batch on).
    double layers_read = 0, layers_written = 0;
};

// `micro_batches` a step; `gathered`: ZeRO 1 over dp > 1 (each rank's updated slices gathered
// into every rank's copy).
OffloadTraffic offload_traffic(const OffloadedState& s, int64_t micro_batches, bool gathered);

// Seconds to read `read` and write `written` bytes one after the other (reads and writes do
// overlap on this machine's disk; the sum is what docs/memory.md measures against).
double disk_time(const Disk& d, double read, double written);

struct OffloadTime {
    double io_s = 0;       // every transfer of the step, at the disk's bandwidths
    double pass_s = 0;     // the optimizer's pass: its update and its transfers overlap
    double exposed_s = 0;  // what the step takes beyond its compute (and the dp communication)
    bool behind = false;   // the pass runs behind the next step's forward
};

// `disk`: this rank's share of the node's. `update_s`: the optimizer's element-wise work over
// the rank's state. `forward_s`: one micro-batch's forward up to the last unit the pass
// updates (the window behind which the pass can run). `compute_s`: the step's forward and
// backward, behind which the copy's reads ahead and writes behind run.
// Behind the forward, exposed = max(0, pass - forward_s); in the step, exposed = pass + norm +
// max(0, layers' transfers - compute_s); pass = max(update_s, the pass's transfers).
OffloadTime offload_time(const OffloadTraffic& t, const Disk& disk, bool behind, double update_s,
                         double forward_s, double compute_s);

}  // namespace weft::plan
