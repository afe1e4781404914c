#include "weft/kernels/memory_bandwidth.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weft/kernels/best_time.hpp"

namespace weft::kernels {

double measure_memory_bandwidth(double seconds) {
    const int64_t n = int64_t(64) << 20;
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), 1.0f),
        c(static_cast<size_t>(n), 2.0f);
    const double t = best_time(seconds, [&] {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) a[size_t(i)] = b[size_t(i)] + 0.5f * c[size_t(i)];
    });
    return 12.0 * double(n) / t;
}

}  // namespace weft::kernels
