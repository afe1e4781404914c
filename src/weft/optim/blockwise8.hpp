#pragma once
// Blockwise 8-bit quantisation with a dynamic map (Dettmers et al. 2022, "8-bit Optimizers via
// Block-wise Quantization"; bitsandbytes' create_dynamic_map): 256 codes in [-1, 1] (signed) or
// [0, 1] (unsigned) spread over seven decades, so that small values keep their relative
// precision; a block is stored as its absmax (fp32) and, per value, the code nearest
// value / absmax.
#include <array>
#include <cstdint>

namespace weft::optim {

inline constexpr int64_t kQuantBlock = 2048;    // values per absmax
inline constexpr int64_t kQuantMinimum = 4096;  // smaller tensors stay fp32, as bitsandbytes

// The 256 codes, ascending: bitsandbytes' create_dynamic_map(signed) with 7 exponent bits.
const std::array<float, 256>& dynamic_map(bool is_signed);

// n values -> codes; returns the block's absmax (0 for an all-zero block, every code that of 0).
float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* q);
void dequantize_block(const uint8_t* q, int64_t n, float absmax, bool is_signed, float* x);

}  // namespace weft::optim
