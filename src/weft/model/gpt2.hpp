#pragma once
// GPT-2 forward and backward, explicit and layer by layer. What backward needs is kept in an
// Activations value per micro-batch, so a pipeline can hold several micro-batches in flight.
// Parameters and gradients are reached through UnitAccess, one unit (embeddings, a block, the
// final norm) at a time, so that data parallelism can reduce a unit's gradients as soon as they
// are complete and ZeRO-3 can gather a unit's parameters just before they are used.
// The model knows no MPI.
#include <cstdint>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"

namespace weft::model {

class UnitAccess {
  public:
    virtual ~UnitAccess() = default;
    // The unit's parameters, laid out as ParamLayout::units[unit] (valid until released).
    virtual float* params(int unit) = 0;
    // Where the unit's gradients are accumulated (same layout).
    virtual float* grads(int unit) = 0;
    // Called once per micro-batch when the unit's forward (backward) no longer needs params.
    virtual void release(int /*unit*/) {}
    // Called after each micro-batch's backward of the unit has finished accumulating.
    virtual void grads_ready(int /*unit*/) {}
};

// Whole parameter and gradient buffers in this process (single process, DP without ZeRO-3).
class FlatAccess : public UnitAccess {
  public:
    FlatAccess(const ParamLayout& layout, float* params, float* grads)
        : layout_(layout), params_(params), grads_(grads) {}
    float* params(int unit) override { return params_ + layout_.units[unit].offset; }
    float* grads(int unit) override { return grads_ + layout_.units[unit].offset; }

  private:
    const ParamLayout& layout_;
    float* params_;
    float* grads_;
};

// Which layers of the model one Activations value serves: a pipeline chunk holds a range of
// consecutive layers, the embedding only on the first chunk, the head only on the last.
struct LayerSpan {
    int first = 0;
    int count = -1;  // -1: every layer from `first` on
    bool head = true;
    // Keep only each layer's input; backward re-runs the layer's forward into one layer's worth
    // of buffers (activation recomputation, Korthikanti et al.'s "full" recompute).
    bool recompute = false;
};

// Everything one micro-batch keeps from forward for backward.
struct Activations {
    Activations(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});
    // Floats these buffers hold for (cfg, B, T): the analytic count the memory estimate uses.
    static int64_t floats(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});

    int64_t B, T;
    int first_layer, n_layers;
    bool head, recompute;
    std::vector<int32_t> inputs, targets;  // [B*T]
    // [n_layers + 1, B*T, C]: the input of each layer of the span, then the output of its last.
    Buffer resid;
    // Per layer of the span (one layer when recomputing), indexed by slot(layer).
    Buffer ln1, ln1_mean, ln1_rstd, qkv, atty, lse, resid2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
    Buffer lnf, lnf_mean, lnf_rstd;  // head only
    Buffer dlnf;                     // gradient of the final norm's output, from the fused head
    Buffer losses;                   // [B*T] per-token loss (head only)

    // Row of resid holding the input of `layer` (layer == first + n_layers: the span's output).
    float* resid_in(int layer) { return resid.data() + (layer - first_layer) * B * T * n_embd_; }
    int slot(int layer) const { return recompute ? 0 : layer - first_layer; }

  private:
    int64_t n_embd_;
};

class Gpt2 {
  public:
    explicit Gpt2(const ModelConfig& cfg, const ModelShard& shard = {});
    const ModelConfig& config() const { return cfg_; }
    const ParamLayout& layout() const { return layout_; }

    // Full forward of one micro-batch. With `train`, the head's backward runs fused with the loss
    // (its gradient scaled by `loss_scale`, e.g. 1 / tokens of the global batch) and what
    // backward needs is kept. Returns the sum of the per-token losses.
    double forward(Activations& a, UnitAccess& w, bool train, float loss_scale);
    void backward(Activations& a, UnitAccess& w);

    // The steps that forward and backward are made of, for schedules that interleave them.
    void embed_forward(Activations& a, UnitAccess& w);
    void block_forward(Activations& a, UnitAccess& w, int layer);
    double head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale);
    void head_backward(Activations& a, UnitAccess& w);
    void block_backward(Activations& a, UnitAccess& w, int layer);
    void embed_backward(Activations& a, UnitAccess& w);

    // The gradient of the residual stream during backward: a pipeline stage writes the gradient
    // of its chunk's output here before the chunk's backward (then calls block_backward from
    // the chunk's last layer down) and reads the gradient of the chunk's input from it after.
    // [B*T, C] of the micro-batch being run.
    float* dresid(int64_t B, int64_t T);

    // Floats of backward scratch the model holds (shared by all micro-batches).
    static int64_t scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T);

  private:
    void ensure_scratch(int64_t BT);
    // The layer's forward from its parameters, into the micro-batch's buffers.
    void block_forward_from(Activations& a, const BlockView& p, int layer);

    ModelConfig cfg_;
    ParamLayout layout_;
    int64_t scratch_bt_ = 0;
    Buffer dres_, dC_, d3C_, d4C_;  // backward scratch: residual gradient and per-width temps
};

}  // namespace weft::model
