#pragma once
// SwiGLU, the Llama MLP's activation, on the packed output of one gate/up product: rows of
// gu[N, 2F] are [gate (F) | up (F)]; out[N, F] = silu(gate) * up, silu(g) = g / (1 + e^-g).
#include <cstdint>

namespace weft::kernels {

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);
// Columns [c0, c1) of swiglu_forward's output for M rows, gu's rows ldgu apart and out's ldo:
// each element the bits swiglu_forward gives it (its vector path, taken below F rounded down to
// 16 lanes, or its scalar one), whatever the range. For a product that applies SwiGLU to the
// columns it has just computed (matmul_rows_swiglu).
void swiglu_forward_cols(float* out, int64_t ldo, const float* gu, int64_t ldgu, int64_t M,
                         int64_t F, int64_t c0, int64_t c1);
// dgu[N, 2F] is overwritten with [dgate | dup]; it must not alias dout.
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F);

// The same on gu kept as bf16 (--dtype bf16): the forward writes its output rounded to bf16 (to
// nearest even), bit for bit round(swiglu_forward(widened gu)); the backward is swiglu_backward
// on the widened gu. Both widen in registers, with no fp32 copy of gu.
void swiglu_forward_bf16(uint16_t* out, const uint16_t* gu, int64_t N, int64_t F);
void swiglu_backward_bf16_input(float* dgu, const float* dout, const uint16_t* gu, int64_t N,
                                int64_t F);
// swiglu_backward_bf16_input with dgu written rounded to bf16 (nearest even), where the gate/up
// product's backward only reads it rounded (matmul_backward_bf16_dout): no fp32 copy is written
// and read back to round it.
void swiglu_backward_bf16(uint16_t* dgu, const float* dout, const uint16_t* gu, int64_t N,
                          int64_t F);

}  // namespace weft::kernels
