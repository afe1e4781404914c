#pragma once
// A loop over [0, n) that enters OpenMP only when it is to run in parallel. `#pragma omp parallel
// for if (false)` still goes through libgomp, and once libgomp's pool of threads exists (after any
// parallel region: loading a checkpoint makes one) each such region costs a futex call, about
// 1.2 us here, and a pool thread's wake. A decode step of a small model is hundreds of loops too
// small for threads (a norm, a rope, a SwiGLU, a bf16 rounding of each product's input, per
// layer): 500 futex calls a token on SmolLM-135M's shape. Which thread runs an index changes
// nothing in it: the body is the same either way.
#include <cstdint>

namespace weft::kernels {

template <class F>
void omp_for(bool parallel, int64_t n, F&& f) {
    if (!parallel) {
        for (int64_t i = 0; i < n; ++i) f(i);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace weft::kernels
