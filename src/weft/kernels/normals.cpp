#include "weft/kernels/normals.hpp"

#include <bit>
#include <cmath>

namespace weft::kernels {

namespace {

// log(u) for u in (0, 1]: u = 2^e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^21 (the next term is below 1e-17).
inline double log_unit(double u) {
    uint64_t bits = std::bit_cast<uint64_t>(u);
    int64_t e = int64_t(bits >> 52) - 1023;
    bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    double m = std::bit_cast<double>(bits);
    const bool high = m > 1.4142135623730951;
    m = high ? m * 0.5 : m;
    e += high ? 1 : 0;
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 21;
    for (int k = 19; k >= 3; k -= 2) p = p * s2 + 1.0 / k;
    const double log_m = 2.0 * s + 2.0 * s * s2 * p;
    // ln 2 in two parts, the first exact in 32 bits, so that e * ln2_hi is exact.
    const double ln2_hi = 0.693147180369123816490, ln2_lo = 1.90821492927058770002e-10;
    return double(e) * ln2_hi + (double(e) * ln2_lo + log_m);
}

// cos(2 pi u) for u in [0, 1): 4u = k + f with k the nearest integer and |f| <= 1/2 (both
// exact), x = f pi / 2 in [-pi/4, pi/4], and cos(k pi/2 + x) is +-cos x or +-sin x.
inline double cos_turn(double u) {
    const double t = u * 4.0, k = std::nearbyint(t), x = (t - k) * 1.5707963267948966;
    const double x2 = x * x;
    // Taylor series: to x^16 and x^17, each within 1e-17 on the interval.
    double c = 1.0 / 20922789888000.0, s = 1.0 / 355687428096000.0;
    const double cinv[] = {-1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0, 1.0 / 40320.0,
                           -1.0 / 720.0,         1.0 / 24.0,        -1.0 / 2.0,       1.0};
    const double sinv[] = {
        -1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
        -1.0 / 5040.0,          1.0 / 120.0,        -1.0 / 6.0,        1.0};
    for (int i = 0; i < 8; ++i) c = c * x2 + cinv[i], s = s * x2 + sinv[i];
    s *= x;
    const int q = int(k) & 3;
    const double v = (q & 1) ? s : c;
    return (q == 1 || q == 2) ? -v : v;
}

}  // namespace

void philox_normals(const Philox& rng, uint64_t first, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        uint32_t r[4];
        rng.block(first + uint64_t(i), 0, r);
        const double u1 = double((uint64_t(r[0]) << 21 ^ r[1]) + 1) / 9007199254740993.0;
        const double u2 = double(uint64_t(r[2]) << 21 ^ r[3]) / 9007199254740992.0;
        out[i] = float(std::sqrt(-2.0 * log_unit(u1)) * cos_turn(u2));
    }
}

}  // namespace weft::kernels
