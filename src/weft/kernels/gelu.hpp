#pragma once
// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
#include <cstdint>

namespace weft::kernels {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = gelu'(inp) * dout (overwritten). dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
// The same over a [rows, cols] gradient that feeds a linear layer with a bias (GPT-2's fc), whose
// gradient dbias[c] += Σ_r dinp[r][c] is summed on the way, over blocks of 64 rows and then the
// blocks in order (the same bits on any number of threads): one pass instead of a second that
// reads the whole gradient back. dinp may alias dout.
void gelu_backward_bias(float* dinp, float* dbias, const float* inp, const float* dout,
                        int64_t rows, int64_t cols);

// The same on an input kept as bf16 (--dtype bf16): the forward writes its output rounded to bf16
// (nearest even), bit for bit round(gelu_forward(widened inp)); the backward is gelu_backward on
// the widened inp. Each widens a block at a time in cache, so no fp32 copy of the whole is made.
void gelu_forward_bf16(uint16_t* out, const uint16_t* inp, int64_t n);
void gelu_backward_bf16_input(float* dinp, const uint16_t* inp, const float* dout, int64_t n);
// The backward of a GELU whose input gradient only feeds a bf16 product with a bias (GPT-2's fc
// under --dtype bf16): dinp [rows, cols] = gelu'(inp)·dout rounded to bf16, the bits of
// gelu_backward_bf16_input and then convert_fp32_to_bf16, and, given dbias, dbias[c] += Σ_r of
// the unrounded dinp, summed over blocks of 64 rows and then the blocks in order (the same bits
// on any number of threads). One pass that writes no fp32 gradient, where the products would
// round it and the bias gradient read it again; dinp must not overlap dout.
void gelu_backward_bf16(uint16_t* dinp, float* dbias, const uint16_t* inp, const float* dout,
                        int64_t rows, int64_t cols);

}  // namespace weft::kernels
