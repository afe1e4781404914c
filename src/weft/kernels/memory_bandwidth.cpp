#include "weft/kernels/memory_bandwidth.hpp"

#include <cstddef>
#include <cstdint>

#include "weft/core/buffer.hpp"
#include "weft/kernels/best_time.hpp"

namespace weft::kernels {

double measure_memory_bandwidth(double seconds) {
    const int64_t n = int64_t(64) << 20;
    // Buffers, on huge pages as the weights are: on 4 KiB pages the triad streams slower than a
    // decode step then reads its weights, and the bound would be below what decode reaches.
    Buffer a(n), b(n), c(n);
    for (int64_t i = 0; i < n; ++i) b[i] = 1.0f, c[i] = 2.0f;
    const double t = best_time(seconds, [&] {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
    });
    return 12.0 * double(n) / t;
}

}  // namespace weft::kernels
