#include "weft/kernels/matmul_rows.hpp"

#include <cstddef>

#include "weft/kernels/precision.hpp"

namespace weft::kernels {

// The reference order: each output element sums its K products in index order, one fp32
// multiply-add at a time, then adds the bias. Whatever a faster path does, it keeps one order per
// element that no M, tile or thread can change.
void matmul_rows(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                 int64_t K, int64_t N) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const float* x = inp + m * K;
            const float* w = weight + n * K;
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += x[k] * w[k];
            out[m * N + n] = bias ? s + bias[n] : s;
        }
}

RowWeightsBf16::RowWeightsBf16(const float* weight, int64_t n, int64_t k)
    : N(n), K(k), w(std::size_t(n * k)) {
    convert_fp32_to_bf16(w.data(), weight, N, K, K);
}

void matmul_rows_bf16(float* out, const float* inp, const RowWeightsBf16& weight, const float* bias,
                      int64_t M) {
    const int64_t K = weight.K, N = weight.N;
    std::vector<float> x(static_cast<std::size_t>(K));
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < K; ++k)
            x[std::size_t(k)] = bf16_to_fp32(fp32_to_bf16(inp[m * K + k]));
        for (int64_t n = 0; n < N; ++n) {
            const uint16_t* w = weight.w.data() + n * K;
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += x[std::size_t(k)] * bf16_to_fp32(w[k]);
            out[m * N + n] = bias ? s + bias[n] : s;
        }
    }
}

}  // namespace weft::kernels
