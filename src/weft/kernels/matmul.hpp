#pragma once
// Matrix products through oneDNN, primitives cached by shape. Row-major throughout; a weight is
// [out, in] as in torch.nn.Linear (Hugging Face's Conv1D [in, out] is transposed at the boundary).
#include <cstdint>

namespace weft::kernels {

// C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, with op(X) = X or Xᵀ, leading dimensions
// lda/ldb/ldc in elements, beta in {0, 1}. The general entry every other product here uses.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[M,N] = inp[M,K] · weight[N,K]ᵀ + bias[N] (bias may be null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N);

// Gradients of matmul_forward. Any output may be null to skip it.
//   dinp[M,K]    = dout · weight         (overwritten, or added to when accumulate_dinp)
//   dweight[N,K] += doutᵀ · inp          (always accumulates: gradient accumulation)
//   dbias[N]     += Σ_m dout[m,:]
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp);

// Measured large-GEMM throughput of this machine in GFLOP/s (fp32), for MFU: repeats an
// n×n×n product for about `seconds` after a warm-up and returns the best rate.
double measure_gemm_peak_gflops(int64_t n, double seconds);
// The same for bf16 inputs with fp32 accumulation and output (oneDNN's matmul primitive; AMX or
// AVX512-BF16 where the CPU has them).
double measure_gemm_peak_bf16_gflops(int64_t n, double seconds);

}  // namespace weft::kernels
