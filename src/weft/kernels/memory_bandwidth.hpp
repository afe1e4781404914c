#pragma once
// How fast this machine streams memory: the bound of memory-bound kernels (`weft profile`'s
// cluster file, `weft bench rows`' share of it).
#include "weft/core/buffer.hpp"

namespace weft::kernels {

// The triad a = b + s·c over arrays far larger than the caches (12 bytes per element), on every
// thread, its arrays made once so that it can be run again and again: between the passes of a
// benchmark, whose bound it then measures in the same seconds. This host's bandwidth moves
// between about 33 and 59 GB/s from one few seconds to the next (other tenants), so a bound taken
// a second before or after what it bounds can be 40% off (docs/serving.md).
class BandwidthProbe {
  public:
    BandwidthProbe();
    // Bytes/s of one pass.
    double once();
    // Bytes/s of the best of repetitions lasting about `seconds`.
    double best(double seconds);

  private:
    Buffer a_, b_, c_;
};

// Bytes/s of the triad, best of repetitions lasting about `seconds`.
double measure_memory_bandwidth(double seconds);

}  // namespace weft::kernels
