#include "weft/core/philox.hpp"

#include <cmath>

namespace weft {

float Philox::normal(uint64_t index) const {
    uint32_t r[4];
    block(index, 0, r);
    // 53-bit uniforms in (0, 1]; double precision keeps the tails exact enough.
    double u1 = ((uint64_t(r[0]) << 21 ^ r[1]) + 1.0) / 9007199254740993.0;
    double u2 = (uint64_t(r[2]) << 21 ^ r[3]) / 9007199254740992.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

float Philox::uniform(uint64_t index) const {
    uint32_t r[4];
    block(index, 1, r);
    return float((r[0] >> 8) * (1.0 / 16777216.0));
}

Philox philox_for(uint64_t seed, std::string_view name) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    h ^= seed * 0x9E3779B97F4A7C15ull;
    return Philox{{uint32_t(h), uint32_t(h >> 32)}};
}

}  // namespace weft
