#pragma once
// The bf16 operand scratch one training step leaves on the thread that runs it (--dtype bf16):
// the per-thread copies the bf16 products round their operands into and, where the CPU emulates
// bf16 products, the fp32 buffers those are widened into (kernels::matmul_bf16_scratch_bytes
// reports the real ones). The trainer's memory estimate, `weft bench train` and the planner's
// engine profile all count it from here.
#include <cstdint>

#include "weft/model/config.hpp"

namespace weft::model {

// One step of a micro-batch of B sequences of T tokens on a model shard at tensor-parallel
// degree tp: every block's linear layers (Family::layer_linears, split as Megatron's column- and
// row-parallel layers are), forward and backward over all B*T rows, reading the inputs the
// family keeps as bf16 as they are; with `head`, the classifier's three products per chunk of
// rows (over 1/tp of the padded vocabulary at tp > 1). `emulated`: count the widened buffers.
int64_t bf16_operand_scratch_bytes(const ModelConfig& cfg, int64_t B, int64_t T, int tp, bool head,
                                   bool emulated);

// The bf16 attention kernel's scratch for one sequence of T, kept on the thread that runs it
// (kernels::attention_bf16_scratch_bytes: tiles on AVX512-BF16, else fp32 copies of q, out,
// dout, dq [T, NH·HS/tp] and k, v, dk, dv [T, NKV·HS/tp]). Under context parallelism
// attention stays fp32 and the caller counts none.
int64_t bf16_attention_scratch_bytes(const ModelConfig& cfg, int64_t T, int tp);

}  // namespace weft::model
