#include "weft/core/philox.hpp"

#include <cmath>

namespace weft {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
    uint64_t p = uint64_t(a) * b;
    hi = uint32_t(p >> 32);
    lo = uint32_t(p);
}
}  // namespace

void Philox::block(uint64_t counter_lo, uint64_t counter_hi, uint32_t out[4]) const {
    uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
    uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(kMul0, c0, hi0, lo0);
        mulhilo(kMul1, c2, hi1, lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += kWeyl0, k1 += kWeyl1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

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
