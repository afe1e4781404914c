#pragma once
// The row loops of a softmax over logits, shared by the fused classifier (classifier.cpp) and its
// vocabulary-parallel phases (classifier_parallel.cpp): the same accumulation order in both, so
// one shard reproduces the fused kernel bit for bit.
#include <cstdint>

namespace weft::kernels::detail {

struct SoftmaxRowOps {
    // Largest element of row[0, V).
    float (*max)(const float* row, int64_t V);
    // Sum of exp(row[v] - max); with `keep` each element is replaced by its exponential.
    float (*exp_sum)(float* row, int64_t V, float max, bool keep);
    // row[v] *= k.
    void (*scale)(float* row, int64_t V, float k);
    // out[v] = row[v] * k rounded to bf16 (nearest even): the same bits as scale and then
    // convert_fp32_to_bf16, in one pass that leaves row as it was.
    void (*scale_bf16)(uint16_t* out, const float* row, int64_t V, float k);
};

// The portable or the AVX-512 loops, as the kernel ISA now in force says.
SoftmaxRowOps softmax_row_ops();

}  // namespace weft::kernels::detail
