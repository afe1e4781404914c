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
#include <optional>

#include "weft/core/buffer.hpp"

namespace weft::parallel {

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
    int64_t kept_bytes() const;

  private:
    // The kept buffer take() hands back for n floats, if any (removed from the pool).
    std::optional<Buffer> reuse(int64_t n);

    std::multimap<int64_t, Buffer> kept_;  // by size in floats
};

}  // namespace weft::parallel
