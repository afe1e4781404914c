#pragma once
// Products whose every output row is the same bits whatever else is in the batch: serving's and
// generation's products, so that a request computes the same tokens and logprobs alone or among
// fifteen others, in a prompt chunk of 16 or of 512 (batch invariance, docs/serving.md). oneDNN's
// products (matmul.hpp) choose their blocking, and with it each sum's order, by M: their rows
// differ in the last bits between M = 1, 2..8 and >= 16. Here an output element is always one
// fixed sequence of operations on its input row and weight row, whatever M, the tile it falls
// in, or the thread that computes it: split over rows and columns, never over K.
//
// Row-major; the weight [N,K] as torch.nn.Linear, read in place (fp32) or as a bf16 copy made
// once (RowWeightsBf16), whose products take the input rounded to bf16 (to nearest even) and
// accumulate in fp32.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/core/huge_pages.hpp"

namespace weft::kernels {

// out[M,N] = inp[M,K] · weight[N,K]ᵀ + bias[N] (bias may be null); row m of out depends only on
// row m of inp, bit for bit, for every M.
void matmul_rows(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                 int64_t K, int64_t N);

// out[M,F] = SwiGLU of inp[M,K] · weight[2F,K]ᵀ, the weight's rows [gate (F) | up (F)]: bit for
// bit matmul_rows then swiglu_forward on each row, for every M. Up to 16 rows (decode, a verify)
// each thread applies SwiGLU to the columns it computed, so the [M, 2F] product never passes
// between threads; more rows take the product, then SwiGLU row by row.
void matmul_rows_swiglu(float* out, const float* inp, const float* weight, int64_t M, int64_t K,
                        int64_t F);

// A weight rounded to bf16 once, for matmul_rows_bf16: in an allocation of its own, or in an
// arena that holds a model's copies together on huge pages (most are under one huge page each).
// Packed for the products that read it: each tile of kPackCols consecutive weight rows (output
// columns) lies as one run, K in steps of kPackK, and within a step the tile's rows one after the
// other (kPackK values each, zeros past K and past N). A tile is then one stream in the order its
// products read it, whatever the rows of input: four weight rows side by side are four short
// streams that the prefetchers learn late (docs/serving.md, "Few rows in bf16").
struct RowWeightsBf16 {
    static constexpr int64_t kPackCols = 4, kPackK = 32;
    RowWeightsBf16() = default;
    RowWeightsBf16(const float* weight, int64_t N, int64_t K);
    // `arena` must outlive the copy.
    RowWeightsBf16(const float* weight, int64_t N, int64_t K, HugePageArena& arena);
    RowWeightsBf16(RowWeightsBf16&&) noexcept = default;
    RowWeightsBf16& operator=(RowWeightsBf16&&) noexcept = default;
    int64_t N = 0, K = 0;
    // [N / kPackCols rounded up][K / kPackK rounded up][kPackCols][kPackK] bf16 bit patterns
    std::span<const uint16_t> w;

    // Elements of the packed copy of an [n,k] weight.
    static int64_t packed_size(int64_t n, int64_t k);

  private:
    std::vector<uint16_t, HugePageAllocator<uint16_t>> own_;
};

// matmul_rows with the input rounded to bf16 and the bf16 weight: fp32 accumulation, the same
// bits per row for every M.
void matmul_rows_bf16(float* out, const float* inp, const RowWeightsBf16& weight, const float* bias,
                      int64_t M);

// matmul_rows_swiglu on a bf16 copy of [gate | up] (N = 2F): matmul_rows_bf16 then
// swiglu_forward on each row, bit for bit.
void matmul_rows_bf16_swiglu(float* out, const float* inp, const RowWeightsBf16& weight, int64_t M);

}  // namespace weft::kernels
