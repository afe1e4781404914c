#include "weft/model/attention_core.hpp"

#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/varlen.hpp"

namespace weft::model {

namespace k = weft::kernels;

void AttentionCore::forward(CpAttention* cp, float* qkv32, float* out32) {
    const int64_t BT = B * T, A = q_width(), KV = kv_width(), L = ld();
    const bool b16 = qkv.bf16();
    const CpAttentionShape cps{B, T, NH, NKV, HS, L, L, A, cu_seqlens, cp_doc_blocks, cp_doc_order};
    const k::AttentionShape whole{B, T, T, NH, HS, L, L, A, 0, NKV};  // the rows as sequences
    if (cp && b16) {
        // The cp region runs on the kept bf16 q, k, v; its output is fp32, rounded into the kept
        // output.
        const uint16_t* q16 = qkv.b16() + at_qkv;
        cp->forward(out32, lse, q16, q16 + A, q16 + A + KV, cps);
        keep_rounded(out, at_out, out32, BT, A);
    } else if (cp) {
        cp->forward(out32, lse, qkv32, qkv32 + A, qkv32 + A + KV, cps);
    } else if (!cu_seqlens.empty() && b16) {
        const uint16_t* q16 = qkv.b16() + at_qkv;
        k::attention_forward_varlen_bf16(out.b16() + at_out, lse, q16, q16 + A, q16 + A + KV, whole,
                                         cu_seqlens);
    } else if (!cu_seqlens.empty()) {
        k::attention_forward_varlen(out32, lse, qkv32, qkv32 + A, qkv32 + A + KV, whole,
                                    cu_seqlens);
    } else if (b16) {
        const uint16_t* q16 = qkv.b16() + at_qkv;
        k::attention_forward_bf16(out.b16() + at_out, lse, q16, q16 + A, q16 + A + KV, whole);
    } else {
        k::attention_forward_qkv(out32, lse, qkv32, B, T, NH, HS, NKV);
    }
}

void AttentionCore::backward(CpAttention* cp, float* dqkv, const float* dout32,
                             const uint16_t* dout16) {
    const int64_t A = q_width(), KV = kv_width(), L = ld();
    const CpAttentionShape cps{B, T, NH, NKV, HS, L, L, A, cu_seqlens, cp_doc_blocks, cp_doc_order};
    const k::AttentionShape whole{B, T, T, NH, HS, L, L, A, 0, NKV};
    if (cp && qkv.bf16()) {
        const uint16_t* q16 = qkv.b16() + at_qkv;
        cp->backward(dqkv, dqkv + A, dqkv + A + KV, dout16, q16, q16 + A, q16 + A + KV,
                     out.b16() + at_out, lse, cps);
    } else if (cp) {
        const float* q = qkv.f32() + at_qkv;
        cp->backward(dqkv, dqkv + A, dqkv + A + KV, dout32, q, q + A, q + A + KV,
                     out.f32() + at_out, lse, cps);
    } else if (!cu_seqlens.empty() && qkv.bf16()) {
        std::memset(dqkv, 0, size_t(B * T * L) * sizeof(float));  // the kernel accumulates
        const uint16_t* q16 = qkv.b16() + at_qkv;
        k::attention_backward_varlen_bf16(dqkv, dqkv + A, dqkv + A + KV, dout16, q16, q16 + A,
                                          q16 + A + KV, out.b16() + at_out, lse, whole, cu_seqlens);
    } else if (!cu_seqlens.empty()) {
        std::memset(dqkv, 0, size_t(B * T * L) * sizeof(float));  // the kernel accumulates
        const float* q = qkv.f32() + at_qkv;
        k::attention_backward_varlen(dqkv, dqkv + A, dqkv + A + KV, dout32, q, q + A, q + A + KV,
                                     out.f32() + at_out, lse, whole, cu_seqlens);
    } else if (qkv.bf16()) {
        std::memset(dqkv, 0, size_t(B * T * L) * sizeof(float));  // the bf16 kernel accumulates
        const uint16_t* q16 = qkv.b16() + at_qkv;
        k::attention_backward_bf16(dqkv, dqkv + A, dqkv + A + KV, dout16, q16, q16 + A,
                                   q16 + A + KV, out.b16() + at_out, lse, whole);
    } else {
        k::attention_backward_qkv(dqkv, dout32, qkv.f32() + at_qkv, out.f32() + at_out, lse, B, T,
                                  NH, HS, NKV);
    }
}

}  // namespace weft::model
