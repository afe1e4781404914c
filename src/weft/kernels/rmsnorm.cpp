#include "weft/kernels/rmsnorm.hpp"

#include <omp.h>

#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

// Below this many elements a parallel region costs more than the rows it would split.
constexpr int64_t kMinParallel = 1 << 15;

// Σ x² in double over eight independent lanes: no long dependency chain, so the loop
// vectorises without reassociation, and the sum does not depend on the thread count.
double sum_squares(const float* x, int64_t C) {
    double lane[8] = {};
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
        for (int j = 0; j < 8; ++j) lane[j] += double(x[c + j]) * x[c + j];
    for (; c < C; ++c) lane[c % 8] += double(x[c]) * x[c];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
    WEFT_PROFILE("rmsnorm_fwd");
    WEFT_CHECK(N >= 0 && C > 0, "rmsnorm_forward: shape N={} C={}, expected N >= 0 and C > 0", N,
               C);
    omp_for(N * C >= kMinParallel, N, [&](int64_t i) {
        const float* x = inp + i * C;
        const float s = float(1.0 / std::sqrt(sum_squares(x, C) / double(C) + double(eps)));
        float* y = out + i * C;
        for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
        rstd[i] = s;
    });
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
    WEFT_PROFILE("rmsnorm_bwd");
    WEFT_CHECK(N >= 0 && C > 0, "rmsnorm_backward: shape N={} C={}, expected N >= 0 and C > 0", N,
               C);
    const bool parallel = N * C >= kMinParallel;
    // Every thread sums its rows' dweight into a private slab; the slabs are added in thread
    // order, so the result is the same on every run with this thread count.
    const int max_threads = parallel ? omp_get_max_threads() : 1;
    std::vector<float> partial(size_t(max_threads) * size_t(C), 0.0f);
#pragma omp parallel if (parallel)
    {
        const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
        float* dw = partial.data() + tid * C;
        for (int64_t i = N * tid / nt; i < N * (tid + 1) / nt; ++i) {
            const float* x = inp + i * C;
            const float* dy = dout + i * C;
            const float s = rstd[i];
            // y = x s w with s = (mean(x²) + eps)^(-1/2): dx = s (w dy) - x s³ mean(x w dy).
            float dot = 0;
            for (int64_t c = 0; c < C; ++c) {
                dot += x[c] * weight[c] * dy[c];
                dw[c] += x[c] * s * dy[c];
            }
            const float k = dot * s * s * s / float(C);
            float* dx = dinp + i * C;
            for (int64_t c = 0; c < C; ++c) dx[c] += s * weight[c] * dy[c] - x[c] * k;
        }
    }
    for (int64_t c = 0; c < C; ++c) {
        float sw = 0;
        for (int t = 0; t < max_threads; ++t) sw += partial[size_t(t) * C + c];
        dweight[c] += sw;
    }
}

}  // namespace weft::kernels
