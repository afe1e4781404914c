#pragma once
// dst += srcᵀ for a block of floats: the last step of a product computed with its operands'
// roles swapped (matmul_backward's weight gradient, matmul.cpp).
#include <cstdint>

namespace weft::kernels {

// dst[r·ldd + c] += src[c·lds + r] for r < rows, c < cols.
void add_transposed(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                    int64_t cols);

}  // namespace weft::kernels
