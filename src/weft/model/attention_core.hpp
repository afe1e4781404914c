#pragma once
// The attention core of a layer, written once for every family: causal attention over the packed
// [q | k | v] rows a layer's projection made (grouped-query: NKV key/value heads for NH query
// heads, this rank's under tensor parallelism), run as whichever variant the run needs, chosen
// here and nowhere else:
//   - context parallel: the CpAttention region (ring, TokenRing, Ulysses or their hybrid);
//   - packed documents (cu_seqlens): attention inside each document (kernels/attention/
//     varlen.hpp), fp32 or bf16; under context parallelism inside the cp region, which takes
//     the whole rows' boundaries;
//   - bf16 (--dtype bf16): the bf16 kernel on the kept bf16 q, k, v;
//   - plain fp32.
// q, k, v are kept for backward in `qkv` and the output in `out` (fp32 or bf16 KeptTensors, at
// the micro-batch's offsets); both are made before and read after by the family's own layers.
#include <cstdint>
#include <span>

#include "weft/model/cp_attention.hpp"
#include "weft/model/kept_tensor.hpp"
#include "weft/model/model.hpp"

namespace weft::model {

struct AttentionCore {
    int64_t B, T, NH, NKV, HS;
    KeptTensor& qkv;  // [B*T, (NH + 2 NKV) HS] at at_qkv
    int64_t at_qkv;
    KeptTensor& out;  // [B*T, NH HS] at at_out
    int64_t at_out;
    float* lse;  // [B, NH, T]: kept for backward
    // Packed documents (Activations::cu_seqlens); empty: one sequence a row.
    std::span<const int64_t> cu_seqlens = {};
    // The per-document zigzag's calls (Activations::cp_doc_blocks); empty: the rows' zigzag.
    std::span<const std::vector<CpDocBlock>> cp_doc_blocks = {};
    // Its gather order under Ulysses (Activations::cp_doc_order); null or empty: none.
    const CpDocOrder* cp_doc_order = nullptr;

    int64_t ld() const { return (NH + 2 * NKV) * HS; }  // a row of packed q, k, v
    int64_t q_width() const { return NH * HS; }
    int64_t kv_width() const { return NKV * HS; }

    // `qkv32`: the fp32 q, k, v when kept in fp32 (qkv.f32() + at_qkv); under bf16 scratch of
    // B*T*ld() floats (generation widens the kept bf16 copy into it). `out32`: where the fp32
    // output goes (out.f32() + at_out), or under bf16 scratch of B*T*q_width() floats that is
    // rounded into `out`. `cp`: the context-parallel region, or null.
    void forward(CpAttention* cp, float* qkv32, float* out32);
    // dqkv [B*T, ld()] is overwritten with the gradients of q, k and v, from the output's
    // gradient: `dout32` in fp32, or under bf16 `dout16`, rounded to bf16 as the products round
    // it (the other may be null).
    void backward(CpAttention* cp, float* dqkv, const float* dout32, const uint16_t* dout16);
};

}  // namespace weft::model
