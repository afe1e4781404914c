#pragma once
// Causal multi-head attention, tiled with an online softmax (flash-attention style): memory grows
// linearly with sequence length, and no T×T matrix exists for all heads at once. The log-sum-exp
// of each query row is kept for backward, which recomputes the scores tile by tile.
//
// Grouped-query attention: NKV key/value heads serve NH query heads, G = NH / NKV each (Llama 2
// 70B, Llama 3; multi-query with NKV = 1); query head h reads key/value head h / G.
//
// Addressing (all row-major, strides in elements): for batch b, position t and query head h,
//   q row  = q + (b*Tq + t)*ldq + h*HS          (HS values)
//   k row  = k + (b*Tk + t)*ldkv + (h/G)*HS, likewise v
//   out    = out + (b*Tq + t)*ldo + h*HS
//   lse    = lse[(b*NH + h)*Tq + t]
// Causality by absolute position: query t sits at q_pos0 + t, key j at k_pos0 + j, and query t
// sees key j iff k_pos0 + j <= q_pos0 + t. A whole sequence has q_pos0 = k_pos0 = 0; decoding
// with a KV cache has q_pos0 > 0 = k_pos0; ring attention calls the kernel once per (query chunk,
// key block) with both set (docs/context_parallel.md). A query row that sees no key of the call
// gets lse = -inf and an output of zeros, so attention_merge (merge.hpp) gives it no
// weight. Scores are scaled by 1/√HS.
#include <cstdint>

namespace weft::kernels {

struct AttentionShape {
    int64_t B, Tq, Tk, NH, HS;
    int64_t ldq, ldkv, ldo;
    int64_t q_pos0 = 0;
    int64_t NKV = 0;     // key/value heads, dividing NH; 0 means NH (plain multi-head attention)
    int64_t k_pos0 = 0;  // absolute position of key 0 (last, so that older initialisers hold)
};

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s);

// Accumulates gradients into dq, dk, dv (same addressing as q, k, v; the caller zeroes them).
// out and lse are those attention_forward returned or, for one block of keys of a longer
// attention, the final output and lse of the whole (merged over every block): then dk and dv are
// this block's gradients and dq gains this block's share, so that the sum over blocks is the
// whole attention's backward (FlashAttention's backward, which needs only D = rowsum(dO∘O) and
// the lse). A key/value head's gradient sums its G query heads' contributions in head order,
// whatever the thread count.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        const AttentionShape& s);

// The common case, the fused projection's output: qkv rows are [q (NH*HS) | k (NKV*HS) |
// v (NKV*HS)], out[B,T,NH*HS], lse[B,NH,T]; NKV = 0 means NH.
void attention_forward_qkv(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                           int64_t NH, int64_t HS, int64_t NKV = 0);
// dqkv is overwritten.
void attention_backward_qkv(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t NH, int64_t HS,
                            int64_t NKV = 0);

// bf16 attention (--dtype bf16 activations): q, k, v, dout and out are bf16 bit patterns at the
// same addressing; lse and the gradients dq, dk, dv stay fp32 (dq, dk, dv accumulate, as above).
// Two paths, by attention_bf16_native():
//   native   (AVX512-BF16, even HS) QKᵀ, PV and backward's five products on bf16 dot products
//            with fp32 accumulation; the scores, softmax, running max and sum, lse and D are
//            fp32, and P and dS are rounded to bf16 for their products, as FlashAttention's bf16
//            kernels do. Within the bounds of test_attention_bf16 of a float64 reference.
//   widened  (elsewhere) each batch's rows widened to fp32 (exactly) and run through the fp32
//            kernel above, the output rounded to nearest even once: the fp32 kernel's result on
//            the bf16 inputs, bit for bit.
void attention_forward_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const AttentionShape& s);
void attention_backward_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* out, const float* lse, const AttentionShape& s);
// Whether bf16 attention of head size HS runs on bf16 dot products here (AVX512-BF16 compiled
// in, the AVX-512 path not forced off, HS even).
bool attention_bf16_native(int64_t HS);
// Bytes of scratch this thread holds for bf16 attention (kept between calls, as the products'
// operand copies are): the widened path's fp32 copies of a sequence and the native path's tiles.
int64_t attention_bf16_scratch_bytes();
// What a thread that runs bf16 attention forward and backward on shape s comes to hold
// (model::bf16_attention_scratch_bytes reads it for the memory estimate).
int64_t attention_bf16_scratch_bytes(const AttentionShape& s);

}  // namespace weft::kernels
