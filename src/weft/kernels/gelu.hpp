#pragma once
// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
#include <cstdint>

namespace weft::kernels {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = gelu'(inp) * dout (overwritten). dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// The same on an input kept as bf16 (--dtype bf16): the forward writes its output rounded to bf16
// (nearest even), bit for bit round(gelu_forward(widened inp)); the backward is gelu_backward on
// the widened inp. Each widens a block at a time in cache, so no fp32 copy of the whole is made.
void gelu_forward_bf16(uint16_t* out, const uint16_t* inp, int64_t n);
void gelu_backward_bf16_input(float* dinp, const uint16_t* inp, const float* dout, int64_t n);

}  // namespace weft::kernels
