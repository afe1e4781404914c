#include "weft/model/row_products.hpp"

namespace weft::model {

const kernels::RowWeightsBf16& RowProducts::rounded(const float* weight, int64_t N, int64_t K) {
    auto it = rounded_.find(weight);
    if (it == rounded_.end())
        it = rounded_.emplace(weight, kernels::RowWeightsBf16(weight, N, K, arena_)).first;
    return it->second;
}

void RowProducts::operator()(float* out, const float* inp, const float* weight, const float* bias,
                             int64_t M, int64_t K, int64_t N) {
    if (M == 0) return;
    if (!bf16_) return kernels::matmul_rows(out, inp, weight, bias, M, K, N);
    kernels::matmul_rows_bf16(out, inp, rounded(weight, N, K), bias, M);
}

void RowProducts::swiglu(float* out, const float* inp, const float* weight, int64_t M, int64_t K,
                         int64_t F) {
    if (M == 0) return;
    if (!bf16_) return kernels::matmul_rows_swiglu(out, inp, weight, M, K, F);
    kernels::matmul_rows_bf16_swiglu(out, inp, rounded(weight, 2 * F, K), M);
}

}  // namespace weft::model
