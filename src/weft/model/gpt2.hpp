#pragma once
// GPT-2 (Hugging Face's GPT2LMHeadModel): learned token and position embeddings, pre-LayerNorm
// blocks of causal multi-head attention with a fused qkv projection and a 4x GELU MLP, a final
// LayerNorm and an output head tied to the token embedding. Forward and backward are explicit
// and layer by layer (model.hpp); tensor and sequence parallelism are the shared regions of
// tp_regions.hpp (Megatron-LM's layout: qkv and MLP-up column-parallel, the projections back
// into the residual stream row-parallel, a vocabulary-parallel embedding and loss).
#include <cstdint>
#include <memory>

#include "weft/core/buffer.hpp"
#include "weft/model/attention_core.hpp"
#include "weft/model/kept_tensor.hpp"
#include "weft/model/model.hpp"
#include "weft/model/norm_block.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/model/tp_regions.hpp"

namespace weft::model {

// What a GPT-2 micro-batch keeps, per layer of the span (one layer when recomputing), indexed by
// slot(layer):
//   ln1, ln2            [B*T, C]   input of the column-parallel projection (sequence parallel:
//                                  the all-gathered LayerNorm outputs)
//   ln*_mean, ln*_rstd  [rows]
//   qkv [B*T, 3C/tp], atty [B*T, C/tp], lse [B, NH/tp, T], fch, fch_gelu [B*T, 4C/tp]
//   resid2              [rows, C]
// and for the head: lnf [B*T, C] (gathered under sequence parallelism), its statistics [rows],
// dlnf [rows, C] the gradient of the final norm's output from the fused head.
// Under bf16 products (span.bf16) the layer's activations are stored as bf16 (KeptTensor):
// - ln1, ln2 and fch_gelu are read only by matrix products, which round them to nearest even
//   anyway, so storing them rounded changes no number;
// - qkv and atty are the bf16 attention kernel's inputs and output
// (kernels/attention/attention.hpp), and fch the
//   GELU's input: rounding them does change the numbers (docs/performance.md measures by how
//   much). Under context parallelism they are kept as bf16 too; the cp regions compute and
//   exchange fp32, on the rounded q, k, v widened into scratch, and their output is rounded.
// The statistics, the lse and the residual stream (resid, resid2) stay fp32. The residual stream
// accumulates every layer's update: bf16 keeps 8 significant bits, so an update smaller than
// 2^-9 of the stream's magnitude would vanish in the sum (why Megatron-LM keeps it in fp32 with
// --fp32-residual-connection, and PyTorch autocast leaves additions in fp32); the LayerNorm
// statistics are computed from it in fp32 too. lnf stays fp32: only the head's forward reads
// it, and the fused classifier takes fp32.
struct Gpt2Activations : Activations {
    Gpt2Activations(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});
    // Floats the whole value holds for (cfg, B, T, span): what the constructor allocates.
    static int64_t floats(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span = {});

    bool bf16;  // ln1, ln2, fch and fch_gelu are bf16 (qkv and atty too unless context parallel)
    KeptTensor ln1, ln2, fch, fch_gelu, qkv, atty;
    Buffer ln1_mean, ln1_rstd, lse, resid2, ln2_mean, ln2_rstd;
    Buffer lnf, lnf_mean, lnf_rstd, dlnf;
};

// Pointers into one unit's tensors, given the flat buffer (params or grads) at the unit's start.
struct Gpt2Block {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
struct Gpt2Embed {
    float *wte, *wpe;
};
struct Gpt2Final {
    float *lnf_w, *lnf_b;
};

class Gpt2 : public Model {
  public:
    // `tp`: this rank's tensor-parallel group (null: no tensor parallelism), whose size and rank
    // must be shard.tp and shard.tp_rank; it must outlive the model. The config's padded
    // vocabulary must divide by tp (config_for_tp). sequence_parallel is ignored at tp = 1.
    explicit Gpt2(const ModelConfig& cfg, const ModelShard& shard = {}, TpComm* tp = nullptr,
                  bool sequence_parallel = false);

    std::unique_ptr<Activations> new_activations(int64_t B, int64_t T,
                                                 LayerSpan span) const override;
    void embed_forward(Activations& a, UnitAccess& w, int64_t pos0 = 0) override;
    void block_forward(Activations& a, UnitAccess& w, int layer) override;
    double head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale) override;
    void head_backward(Activations& a, UnitAccess& w) override;
    void block_backward(Activations& a, UnitAccess& w, int layer) override;
    void embed_backward(Activations& a, UnitAccess& w) override;
    void forward_rows(const RowBatch& b, UnitAccess& w, KvPool& kv, RowProducts& mm,
                      float* logits) override;
    int64_t kv_width() const override { return cfg_.n_embd / tp_size_; }
    float* dresid(int64_t B, int64_t T) override;

    // Floats of scratch the model holds (shared by all micro-batches), for tensor-parallel degree
    // tp. With tp > 1 the head's logits are the model's too: add
    // kernels::classifier_shard_scratch_floats(B*T, padded vocabulary / tp) on the rank with the
    // head, in place of the fused kernel's classifier_scratch_floats.
    static int64_t scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp = 1,
                                  bool sequence_parallel = false);
    // Floats forward_rows allocates for `rows` rows at tp 1 (Family::row_floats).
    static int64_t row_floats(const ModelConfig& cfg, int64_t rows);

  private:
    Gpt2Activations& acts(Activations& a) const;
    void ensure_scratch(int64_t BT);
    // The attention core (attention_core.hpp) of the micro-batch slot `slot` of `a`, and the
    // statistics its two norms keep.
    AttentionCore attention(Gpt2Activations& a, int64_t slot) const;
    NormBlock::Stats ln1_stats(Gpt2Activations& a, int64_t slot) const;
    NormBlock::Stats ln2_stats(Gpt2Activations& a, int64_t slot) const;
    // The layer's forward from its parameters, into the micro-batch's buffers.
    void block_forward_from(Gpt2Activations& a, const Gpt2Block& p, int layer, UnitAccess& w);
    Gpt2Block block(float* unit_base, int layer) const;
    Gpt2Embed embed(float* unit_base) const;
    Gpt2Final final_norm(float* unit_base) const;

    TpRegions tp_;
    NormBlock norm_;  // ln1, ln2 (slots 0, 1) and the final norm
    int64_t scratch_bt_ = 0;
    // Backward scratch: residual gradient [rows, C] and per-width temps [B*T, C], [B*T, 3C/tp],
    // [B*T, 4C/tp]. With tp > 1 dC_ also takes the partial sums of forward's row-parallel
    // products under sequence parallelism and the gathered gradients in backward.
    Buffer dres_, dC_, d3C_, d4C_;
};

}  // namespace weft::model
