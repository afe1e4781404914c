#pragma once
// Large temporaries that every step asks for again in the same sizes (ZeRO's gradient buckets,
// the pieces of their reductions, stage 3's gathered units), kept for the next request rather
// than freed.
//
// Freed, they went back to glibc's heap (blocks under its 32 MiB mmap threshold) in an order
// that depends on when MPI completes each operation, and the heap fragmented: gpt2's ZeRO 3 at
// dp 2 peaked anywhere from 1596 to 2112 MiB per rank from run to run against an estimate of
// 1740. Kept, the same buffers serve every step, so the resident size is what the step holds at
// its fullest, and the first step's page faults are the only ones.
#include <cstdint>
#include <map>
#include <vector>

#include "weft/core/buffer.hpp"

namespace weft::parallel {

// A bf16 payload on the wire (parallel/bf16_wire.hpp): values as their uint16_t bit patterns.
using Bf16Buffer = std::vector<uint16_t>;

class BufferPool {
  public:
    // A buffer of at least n floats: the smallest kept one that is no more than a quarter
    // larger, else a new one. Its contents are unspecified (zero-filled when new); its size()
    // may exceed n.
    Buffer take(int64_t n);
    // As take, the first n floats zeroed.
    Buffer take_zeroed(int64_t n);
    // Keeps `b` for a later take (nothing for an empty buffer).
    void give(Buffer&& b);
    // As take, for n bf16 values. Pooled, the bf16 reductions' wire buffers and sums no longer
    // fault in fresh pages every step: at dp 2 that was a fifth of gpt2's ZeRO 0 step with
    // --grad-reduce-dtype bf16.
    Bf16Buffer take_bf16(int64_t n);
    void give(Bf16Buffer&& b);
    int64_t kept_bytes() const;

  private:
    std::multimap<int64_t, Buffer> kept_;           // by size in floats
    std::multimap<int64_t, Bf16Buffer> kept_bf16_;  // by size in values
};

}  // namespace weft::parallel
