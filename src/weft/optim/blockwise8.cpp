#include "weft/optim/blockwise8.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

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

uint8_t quantize_value(const std::array<float, 256>& map, float x) {
    const auto it = std::lower_bound(map.begin(), map.end(), x);
    if (it == map.begin()) return 0;
    if (it == map.end()) return 255;
    const auto below = it - 1;
    return uint8_t((x - *below <= *it - x ? below : it) - map.begin());
}

float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* q) {
    const std::array<float, 256>& map = dynamic_map(is_signed);
    float absmax = 0;
    for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    if (absmax == 0) {
        std::fill_n(q, n, quantize_value(map, 0.0f));
        return 0;
    }
    const float inv = 1.0f / absmax;
    for (int64_t i = 0; i < n; ++i) q[i] = quantize_value(map, x[i] * inv);
    return absmax;
}

void dequantize_block(const uint8_t* q, int64_t n, float absmax, bool is_signed, float* x) {
    const std::array<float, 256>& map = dynamic_map(is_signed);
    for (int64_t i = 0; i < n; ++i) x[i] = map[q[i]] * absmax;
}

}  // namespace weft::optim
