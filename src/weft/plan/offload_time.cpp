#include "weft/plan/offload_time.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::plan {

OffloadTraffic offload_traffic(const OffloadedState& s, int64_t micro_batches, bool gathered) {
    OffloadTraffic t;
    const double state = s.optimizer + s.master, S = s.copy, M = double(micro_batches);
    t.pass_read = t.pass_written = state;
    if (S == 0) return t;
    // The update reads every gradient record and writes every weight record, unread (it
    // overwrites them whole).
    t.pass_read += S;
    t.pass_written += S;
    // At ZeRO 1 a rank writes its slice of every unit: leaving a unit reads the rest of its
    // record, the gather reads the slice back and writes the whole unit again.
    if (gathered) {
        t.pass_read += 2 * S;
        t.pass_written += S;
    }
    t.norm_read = S;
    t.layers_read = M * (2 * S - s.embedding) + (M - 1) * S;
    t.layers_written = M * S;
    return t;
}

double disk_time(const Disk& d, double read, double written) {
    WEFT_CHECK(d.read > 0 && d.write > 0,
               "internal: pricing --offload on a cluster without the disk's bandwidths");
    return read / d.read + written / d.write;
}

OffloadTime offload_time(const OffloadTraffic& t, const Disk& disk, bool behind, double update_s,
                         double forward_s, double compute_s) {
    OffloadTime o;
    o.behind = behind;
    // The pass reads the next group and writes the last while it updates this one.
    const double pass_io = disk_time(disk, t.pass_read, t.pass_written);
    o.pass_s = std::max(update_s, pass_io);
    const double norm = disk_time(disk, t.norm_read, 0);
    const double layers = disk_time(disk, t.layers_read, t.layers_written);
    o.io_s = pass_io + norm + layers;
    // Behind: the forward reads each unit once the pass has written it, and the backward waits
    // for the whole pass (it zeroes the gradients the pass reads): only what outlasts the first
    // micro-batch's forward shows. In the step, the pass and the norm show whole; the copy's
    // transfers run behind the layers' compute.
    o.exposed_s = behind ? std::max(0.0, o.pass_s - forward_s)
                         : o.pass_s + norm + std::max(0.0, layers - compute_s);
    return o;
}

}  // namespace weft::plan
