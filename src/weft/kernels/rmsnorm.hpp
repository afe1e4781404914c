#pragma once
// RMSNorm over the last dimension of inp[N,C], in fp32 (as Hugging Face's LlamaRMSNorm):
// out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp²) + eps).
#include <cstdint>

namespace weft::kernels {

// rstd[N] is kept for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);

// Accumulates: dinp += ∂L/∂inp (the residual stream's gradient is summed into), dweight +=.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

}  // namespace weft::kernels
