#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A value depends only on its
// key and counter, never on what was drawn before, so every rank can initialise its own shard of a
// logical tensor and get exactly the numbers a single process would.
#include <cstdint>
#include <string_view>

namespace weft {

struct Philox {
    uint32_t key[2];
    // Four independent 32-bit words for a 128-bit counter. Inline, so that a loop over counters
    // (kernels::philox_normals) vectorises it.
    void block(uint64_t counter_lo, uint64_t counter_hi, uint32_t out[4]) const {
        uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
        uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
        uint32_t k0 = key[0], k1 = key[1];
        for (int round = 0; round < 10; ++round) {
            const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
            const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
            c1 = uint32_t(p1), c3 = uint32_t(p0), c0 = n0, c2 = n2;
            k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
        }
        out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
    }
    // Standard normal for element `index` of the stream (Box-Muller on one counter block).
    float normal(uint64_t index) const;
    // Uniform in [0, 1) for element `index`.
    float uniform(uint64_t index) const;
};

// Key for the stream of a named tensor: FNV-1a of the name mixed with the seed.
Philox philox_for(uint64_t seed, std::string_view name);

}  // namespace weft
