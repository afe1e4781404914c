#pragma once
// Llama (Hugging Face's LlamaForCausalLM, and the models shaped like it: Llama 2/3, SmolLM,
// TinyLlama): a token embedding with no positions, pre-RMSNorm blocks of causal grouped-query
// attention with rotary position embeddings (Hugging Face's rotate_half layout, so its weights
// load with no permutation) and a SwiGLU MLP, no biases, a final RMSNorm and an output head tied
// to the embedding or not. Forward and backward are explicit and layer by layer (model.hpp);
// tensor and sequence parallelism are the shared regions of tp_regions.hpp: q/k/v and gate/up
// column-parallel (a rank keeps whole query and key/value heads, so the kv heads split over tp
// as the query heads do), o_proj and down_proj row-parallel, vocabulary-parallel embedding and
// loss.
//
// A block's q, k and v weights are three tensors (Hugging Face's names) stored back to back in
// the unit, so they form one [(NH + 2 NKV) HS / tp, C] matrix and one product computes the
// packed [q | k | v] rows the attention kernel reads; gate and up likewise give [gate | up]
// rows for the SwiGLU kernel. (n_embd must be a multiple of 16 so that no alignment padding
// falls between them.)
//
// With ModelConfig::qkv_bias (Qwen2) the product adds a bias to q, k and v before the rotary
// embedding, as transformers does; its three tensors close the block's unit back to back, one
// [(NH + 2 NKV) HS / tp] bias split over tp like the rows of q/k/v.
#include <cstdint>
#include <memory>

#include "weft/core/buffer.hpp"
#include "weft/kernels/rope.hpp"
#include "weft/model/attention_core.hpp"
#include "weft/model/kept_tensor.hpp"
#include "weft/model/model.hpp"
#include "weft/model/moe_block.hpp"
#include "weft/model/norm_block.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/model/tp_regions.hpp"

namespace weft::model {

// Per layer of the span (one when recomputing), indexed by slot(layer):
//   ln1, ln2    [B*T, C]        RMSNorm outputs, the column-parallel inputs (gathered under
//                               sequence parallelism)
//   rstd1, rstd2 [rows]
//   qkv  [B*T, (NH + 2 NKV) HS / tp]   after the rotary embedding
//   atty [B*T, NH HS / tp], lse [B, NH / tp, T]
//   resid2 [rows, C]
//   gu [B*T, 2F / tp] ([gate | up]), act [B*T, F / tp] (silu(gate) * up)
// and for the head: lnf [B*T, C], lnf_rstd [rows], dlnf [rows, C]. With experts (n_experts > 0)
// gu and act are empty and each slot keeps a MoeLayerActs instead, and each layer of the span
// its micro-batch's routing counts [E] (doubles; kept per layer, not per slot, so that a
// recomputed layer routes with the counts its forward summed over the ranks).
//
// Under bf16 products (span.bf16) ln1, ln2, gu, act, qkv and atty are stored as bf16
// (KeptTensor), as GPT-2's are (gpt2.hpp): ln1, ln2 and act only feed products, which round
// them anyway; qkv (rounded after the rotary embedding) and atty are the bf16 attention kernel's
// (grouped-query: NKV < NH), and gu the SwiGLU's input, which changes the numbers. Kept fp32:
// the RMSNorm statistics, the lse, the residual stream (resid, resid2; gpt2.hpp says why), lnf;
// qkv and atty under context parallelism (its regions take fp32); and with experts ln2 and the
// MoE block's own buffers (MoeLayerActs: the expert products and the router read fp32).
struct LlamaActivations : Activations {
    LlamaActivations(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});
    static int64_t floats(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span = {});

    KeptTensor ln1, qkv, atty, ln2, gu, act;
    Buffer rstd1, lse, resid2, rstd2;
    Buffer lnf, lnf_rstd, dlnf;
    std::vector<MoeLayerActs> moe;                // per slot
    std::vector<std::vector<double>> moe_counts;  // per layer of the span
};

// A block's tensors; a dense block has gu_w and down_w, an MoE block moe. qkv_b is the packed
// [q | k | v] bias with ModelConfig::qkv_bias (Qwen2), else null.
struct LlamaBlock {
    float *ln1_w, *qkv_w, *o_w, *ln2_w, *gu_w, *down_w;
    MoeWeights moe;
    float* qkv_b = nullptr;
};

// The rotary kernels' scaling for a config's rope_scaling (also what a GGUF export's
// rope_freqs table is derived from).
kernels::RopeScaling rope_scaling(const RopeScalingConfig& r);

class Llama : public Model {
  public:
    explicit Llama(const ModelConfig& cfg, const ModelShard& shard = {}, TpComm* tp = nullptr,
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
    int64_t kv_width() const override { return NKV_ * HS_; }
    float* dresid(int64_t B, int64_t T) override;
    MoeStats take_moe_stats() override;
    std::optional<double> balance_routers(const MoeStats& s) override;
    std::vector<float> router_bias() const override;
    void set_router_bias(const std::vector<float>& saved, const std::string& from) override;
    void set_expert_comm(ExpertComm* comm) override;

    static int64_t scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp = 1,
                                  bool sequence_parallel = false);
    // Floats forward_rows allocates for `rows` rows at tp 1 (Family::row_floats).
    static int64_t row_floats(const ModelConfig& cfg, int64_t rows);

  private:
    // Whether the MoE layers balance their routing by a bias (aux-loss-free; rate above 0).
    bool balances() const;
    LlamaActivations& acts(Activations& a) const;
    void ensure_scratch(int64_t BT);
    const kernels::RopeTable& rope(int64_t positions);
    // `recomputing`: the re-run of a layer's forward in its backward (the MoE routing counts are
    // the forward's).
    // The attention core (attention_core.hpp) of the micro-batch slot `slot` of `a`.
    AttentionCore attention(LlamaActivations& a, int64_t slot) const;
    void block_forward_from(LlamaActivations& a, const LlamaBlock& p, int layer, UnitAccess& w,
                            bool recomputing = false);
    LlamaBlock block(float* unit_base, int layer) const;
    // The output head's weight (the embedding when tied) in params or grads.
    float* head_weight(UnitAccess& w, bool grads) const;

    TpRegions tp_;
    NormBlock norm_;  // the input and post-attention norms (slots 0, 1) and the final norm
    int64_t NH_, NKV_, HS_, F_;  // this rank's query and key/value heads, head width, FFN width
    int64_t qkv_;                // (NH_ + 2 NKV_) HS_: one row of the packed projection
    kernels::RopeTable rope_;
    int64_t scratch_bt_ = 0;
    // Backward scratch: dres_ [rows, C], dC_ [B*T, C], dqkv_ [B*T, qkv_], dact_ [B*T, F_],
    // wide_ [B*T, max(2 F_, NH_ HS_)] (the gate/up gradient, then the attention output's),
    // and under sequence parallelism rows_ [rows, C].
    Buffer dres_, dC_, dqkv_, dact_, wide_, rows_;
    std::unique_ptr<MoeMlp> moe_;  // n_experts > 0
    MoeStats moe_stats_;
    std::vector<float> router_bias_;  // [n_layer, n_experts], zero until balancing moves it
};

}  // namespace weft::model
