#pragma once
// fp32 -> bf16 conversion for the bf16 matrix products. bf16 is the top half of an fp32 (8
// exponent bits, 7 mantissa bits); it is stored here as its uint16_t bit pattern.
//
// Rounding is to nearest, ties to even, as AVX512-BF16's vcvtneps2bf16 does; that instruction
// also treats denormal inputs as zero and quietens NaNs, and the portable path does the same, so
// both paths give the same bits.
#include <cstdint>

namespace weft::kernels {

uint16_t fp32_to_bf16(float x);
float bf16_to_fp32(uint16_t h);

// dst[r*cols + c] = bf16(scale * src[r*ld_src + c]) for r < rows, c < cols: a strided block into
// a compact one. Parallel (OpenMP) when large.
void convert_fp32_to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols,
                          int64_t ld_src, float scale = 1.0f);

// dst[i] = fp32(src[i]), and dst[i] += fp32(src[i]), for i < n: exact (bf16 is the top half
// of an fp32). Parallel (OpenMP) when large.
void convert_bf16_to_fp32(float* dst, const uint16_t* src, int64_t n);
void add_bf16_to_fp32(float* dst, const uint16_t* src, int64_t n);

// convert_fp32_to_bf16 of a compact src [rows, cols] (scale 1) that also adds its column sums
// into dsum, in column_sums.hpp's order: a product's output gradient rounded for its products
// and its bias gradient summed, in one pass over it.
void convert_fp32_to_bf16_sum_columns(uint16_t* dst, float* dsum, const float* src, int64_t rows,
                                      int64_t cols);
// Whether convert_fp32_to_bf16 uses AVX512-BF16 instructions now (compiled in and the kernel ISA
// is avx512).
bool bf16_conversion_vectorised();

}  // namespace weft::kernels
