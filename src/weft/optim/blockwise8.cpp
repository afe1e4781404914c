#include "weft/optim/blockwise8.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::optim {

namespace {

// bitsandbytes.functional.create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for
// each decade i of 7, 2^i (signed, and their negatives) or 2^(i+1) (unsigned) midpoints of
// linspace(0.1, 1) scaled by 10^(i - 6); then 0 and 1.
std::array<float, 256> make_map(bool is_signed) {
    std::vector<double> data;
    for (int i = 0; i < 7; ++i) {
        const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        const double scale = std::pow(10.0, double(i - 6));
        for (int j = 0; j + 1 < items; ++j) {
            // torch.linspace in fp32, as bitsandbytes builds it
            const float lo = float(0.1 + 0.9 * j / (items - 1));
            const float hi = float(0.1 + 0.9 * (j + 1) / (items - 1));
            const double mean = double(float((lo + hi) / 2.0f));
            data.push_back(scale * mean);
            if (is_signed) data.push_back(-scale * mean);
        }
    }
    data.push_back(0.0);
    data.push_back(1.0);
    std::sort(data.begin(), data.end());
    std::array<float, 256> map{};
    for (size_t i = 0; i < 256; ++i) map[i] = float(data[i]);
    return map;
}

}  // namespace

const std::array<float, 256>& dynamic_map(bool is_signed) {
    static const std::array<float, 256> s = make_map(true), u = make_map(false);
    return is_signed ? s : u;
}

namespace {

// Finding the nearest code: a table over the top 16 bits of the value (sign, exponent and 7
// mantissa bits: buckets 0.8% wide, narrower than the gap between any two codes) gives the
// nearest code of the bucket's lower end, and one comparison with the midpoint above it finishes.
// A binary search over the codes made the 8-bit step 3x slower than AdamW's (tiny, 3.3M
// parameters).
struct Quantizer {
    std::array<float, 256> mid;  // between code j and j + 1; +inf last
    std::vector<uint8_t> lut;    // per bucket

    explicit Quantizer(const std::array<float, 256>& map) : lut(size_t(1) << 16) {
        for (size_t j = 0; j + 1 < 256; ++j) mid[j] = map[j] + (map[j + 1] - map[j]) / 2;
        mid[255] = std::numeric_limits<float>::infinity();
        auto slow = [&](float x) {  // the number of midpoints below x
            return uint8_t(std::lower_bound(mid.begin(), mid.end(), x) - mid.begin());
        };
        for (uint32_t b = 0; b < (1u << 16); ++b) {
            const float lo = std::bit_cast<float>(b << 16),
                        hi = std::bit_cast<float>(b << 16 | 0xFFFFu);
            if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
            const uint8_t a = slow(lo), z = slow(hi);
            WEFT_CHECK(std::max(a, z) - std::min(a, z) <= 1,
                       "internal: a quantisation bucket at {} spans codes {} to {}", lo, a, z);
            lut[b] = std::min(a, z);
        }
    }
    uint8_t operator()(float x) const {
        const uint8_t q = lut[std::bit_cast<uint32_t>(x) >> 16];
        return uint8_t(q + (x > mid[q] ? 1 : 0));
    }
};

const Quantizer& quantizer(bool is_signed) {
    static const Quantizer s(dynamic_map(true)), u(dynamic_map(false));
    return is_signed ? s : u;
}

}  // namespace

float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* q) {
    const Quantizer& nearest = quantizer(is_signed);
    float absmax = 0;
    for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    if (absmax == 0) {
        std::fill_n(q, n, nearest(0.0f));
        return 0;
    }
    const float inv = 1.0f / absmax;
    for (int64_t i = 0; i < n; ++i) q[i] = nearest(x[i] * inv);
    return absmax;
}

void dequantize_block(const uint8_t* q, int64_t n, float absmax, bool is_signed, float* x) {
    const std::array<float, 256>& map = dynamic_map(is_signed);
    for (int64_t i = 0; i < n; ++i) x[i] = map[q[i]] * absmax;
}

}  // namespace weft::optim
