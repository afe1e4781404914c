#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A value depends only on its
// key and counter, never on what was drawn before, so every rank can initialise its own shard of a
// logical tensor and get exactly the numbers a single process would.
#include <cstdint>
#include <string_view>

namespace weft {

struct Philox {
    uint32_t key[2];
    // Four independent 32-bit words for a 128-bit counter.
    void block(uint64_t counter_lo, uint64_t counter_hi, uint32_t out[4]) const;
    // Standard normal for element `index` of the stream (Box-Muller on one counter block).
    float normal(uint64_t index) const;
    // Uniform in [0, 1) for element `index`.
    float uniform(uint64_t index) const;
};

// Key for the stream of a named tensor: FNV-1a of the name mixed with the seed.
Philox philox_for(uint64_t seed, std::string_view name);

}  // namespace weft
