#include "weft/model/row_products.hpp"

namespace weft::model {

void RowProducts::operator()(float* out, const float* inp, const float* weight, const float* bias,
                             int64_t M, int64_t K, int64_t N) {
    if (M == 0) return;
    if (!bf16_) return kernels::matmul_rows(out, inp, weight, bias, M, K, N);
    auto it = rounded_.find(weight);
    if (it == rounded_.end())
        it = rounded_.emplace(weight, kernels::RowWeightsBf16(weight, N, K, arena_)).first;
    kernels::matmul_rows_bf16(out, inp, it->second, bias, M);
}

}  // namespace weft::model
