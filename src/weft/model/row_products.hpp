#pragma once
// The matrix products of serving and generation (Model::forward_rows): every one through
// kernels::matmul_rows, whose output rows do not depend on how many rows the call has, so that
// a sequence's bits do not depend on what else runs in its batch. Under bf16 each weight is
// rounded to bf16 once, on its first use, and kept for the model's lifetime
// (kernels::RowWeightsBf16), all of them in one huge-page arena.
#include <cstdint>
#include <unordered_map>

#include "weft/kernels/matmul_rows.hpp"

namespace weft::model {

class RowProducts {
  public:
    explicit RowProducts(bool bf16 = false) : bf16_(bf16) {}
    bool bf16() const { return bf16_; }
    // out[M,N] = inp[M,K] · weight[N,K]ᵀ + bias[N] (bias may be null).
    void operator()(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N);
    // out[M,F] = SwiGLU of inp[M,K] · weight[2F,K]ᵀ, the weight's rows [gate | up]: the same bits
    // as the product then swiglu_forward on each row (kernels::matmul_rows_swiglu).
    void swiglu(float* out, const float* inp, const float* weight, int64_t M, int64_t K, int64_t F);

  private:
    const kernels::RowWeightsBf16& rounded(const float* weight, int64_t N, int64_t K);

    bool bf16_;
    // Where the rounded copies live: together on huge pages (each layer's alone is under one).
    HugePageArena arena_;
    // The rounded copies, by the fp32 weight they were made from (weights do not move while a
    // model serves).
    std::unordered_map<const float*, kernels::RowWeightsBf16> rounded_;
};

}  // namespace weft::model
