#pragma once
// LayerNorm over the last dimension of inp[N,C], fp32 statistics.
#include <cstdint>

namespace weft::kernels {

// out = (inp - mean) * rstd * weight + bias; mean[N] and rstd[N] are kept for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps = 1e-5f);

// Accumulates: dinp += ∂L/∂inp (the residual stream's gradient is summed into), dweight +=,
// dbias +=.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C);

}  // namespace weft::kernels
