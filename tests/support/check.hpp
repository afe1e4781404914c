#pragma once
// Helpers shared by the kernel and model tests: deterministic random inputs, differences, and a
// central finite-difference gradient in double precision.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"

namespace weft::test {

// The message of the weft::Error f throws, or "no error".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
    Philox rng = philox_for(seed, "test");
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
    return v;
}

// max |a - b| / (|b| + atol): a relative error that does not explode near zero.
inline double max_rel_diff(const float* a, const float* b, size_t n, double atol = 1e-6) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (std::abs(double(b[i])) + atol));
    return worst;
}

inline double max_abs_diff(const float* a, const float* b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    return worst;
}

// ∂loss/∂x[i] by (loss(x + h) - loss(x - h)) / 2h for the listed indices; x is restored.
inline std::vector<double> finite_difference(std::vector<float>& x,
                                             const std::function<double()>& loss,
                                             const std::vector<size_t>& indices, float h = 1e-2f) {
    std::vector<double> g;
    for (size_t i : indices) {
        float keep = x[i];
        x[i] = keep + h;
        double up = loss();
        x[i] = keep - h;
        double down = loss();
        x[i] = keep;
        g.push_back((up - down) / (2.0 * h));
    }
    return g;
}

}  // namespace weft::test
