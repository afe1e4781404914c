#include "weft/model/bf16_scratch.hpp"

#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/family.hpp"

namespace weft::model {

int64_t bf16_operand_scratch_bytes(const ModelConfig& cfg, int64_t B, int64_t T, int tp, bool head,
                                   bool emulated) {
    kernels::Bf16ScratchCount count;
    const int64_t BT = B * T;
    for (const LinearShape& l : family_of(cfg).layer_linears(cfg)) {
        const int64_t out = l.column_parallel ? l.out / tp : l.out;
        const int64_t in = l.column_parallel ? l.in : l.in / tp;
        count.forward(BT, in, out, l.bf16_input);
        count.backward(BT, in, out, l.bf16_input, l.bf16_dout);
    }
    if (head) {
        // TpRegions::head: the whole real vocabulary at tp = 1, else this rank's slice (rank 0's,
        // the largest), chunk by chunk of rows (logits, then dx and the embedding's gradient).
        const int64_t V = tp == 1 ? cfg.vocab_size : cfg.padded_vocab() / tp;
        const int64_t r = kernels::classifier_chunk_rows(BT), C = cfg.n_embd;
        if (tp == 1) {
            // kernels/classifier.cpp pins the table (depth 0), each chunk's input (1) and its
            // logits' gradient, written transposed (2). logits = x·tableᵀ, dx = (dlogitsᵀ)ᵀ·table,
            // dtable += dlogitsᵀ·x.
            count.pinned_a(1, r * C);
            count.pinned_b(0, 0, false, true, r, V, C, false);
            count.gemm(false, true, r, V, C, false, true, true);
            count.pinned_a(2, r * V);
            count.pinned_b(0, 1, true, false, r, C, V, false);
            count.gemm(true, false, r, C, V, false, true, true);
            count.pinned_b(1, 0, false, false, V, C, r, true);
            count.gemm(false, false, V, C, r, true, true, true);
        } else {
            count.gemm(false, true, r, V, C, false);
            count.gemm(false, false, r, C, V, false);
            count.gemm(true, false, V, C, r, true);
        }
    }
    return count.bytes(emulated);
}

int64_t bf16_attention_scratch_bytes(const ModelConfig& cfg, int64_t T, int tp) {
    const int64_t HS = cfg.head_dim(), NH = cfg.n_head / tp, NKV = cfg.kv_heads() / tp;
    kernels::AttentionShape s{1, T, T, NH, HS, NH * HS, NKV * HS, NH * HS};
    s.NKV = NKV;
    return kernels::attention_bf16_scratch_bytes(s);
}

}  // namespace weft::model
