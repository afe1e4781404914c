#pragma once
// SwiGLU, the Llama MLP's activation, on the packed output of one gate/up product: rows of
// gu[N, 2F] are [gate (F) | up (F)]; out[N, F] = silu(gate) * up, silu(g) = g / (1 + e^-g).
#include <cstdint>

namespace weft::kernels {

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);
// dgu[N, 2F] is overwritten with [dgate | dup]; it must not alias dout.
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F);

}  // namespace weft::kernels
