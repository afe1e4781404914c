#pragma once
// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
#include <cstdint>

namespace weft::kernels {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = gelu'(inp) * dout (overwritten). dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace weft::kernels
