#pragma once
// A bf16 product's B operand rounded and packed into oneDNN's blocked weights layout by hand,
// for the one layout oneDNN 2.6 gives its AVX512-BF16 matmul (BA16a64b2a: 32 x 64 blocks of
// K x N, pairs of K innermost). oneDNN's own reorder into it runs at 12-33 GB/s on 2 Zen 5
// threads; a GPT-2 step packs 85M weights twice and 264M kept activations once.
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

namespace weft::kernels::detail {

// Packs the plain block `plain` ([K, N], fp32 or bf16, row-major or transposed) at `src` into
// dst laid out as `packed`, rounding to bf16 to nearest even: the bits oneDNN's reorder between
// the two descriptors gives. Returns false, touching nothing, where `packed` is another layout
// (padding, another ISA's blocking) or this CPU cannot: the caller then reorders with oneDNN.
bool pack_b_bf16(uint16_t* dst, const dnnl::memory::desc& packed, const void* src,
                 const dnnl::memory::desc& plain);

}  // namespace weft::kernels::detail
