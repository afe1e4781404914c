#pragma once
// The model seam: what the engine (trainer, pipeline stage, ZeRO, checkpoints, generation) sees
// of a model, whatever its family. A model runs explicitly and layer by layer: embedding, each
// block, the fused head and loss, forward and backward per micro-batch. What backward needs is
// kept in an Activations value per micro-batch (each family extends it with its own buffers), so
// a pipeline can hold several micro-batches in flight. Parameters and gradients are reached
// through UnitAccess, one unit (the embedding, a block, the final norm and head) at a time, so
// that data parallelism can reduce a unit's gradients as soon as they are complete and ZeRO-3 can
// gather a unit's parameters just before they are used. The model knows no MPI: tensor
// parallelism reaches it as a TpComm (tp_comm.hpp) through the shared regions of tp_regions.hpp;
// context parallelism as a CpComm (cp_comm.hpp) through the ring region of cp_attention.hpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/kernels/distill_rows.hpp"
#include "weft/model/config.hpp"
#include "weft/model/cp_comm.hpp"
#include "weft/model/cp_doc_block.hpp"
#include "weft/model/moe_comm.hpp"
#include "weft/model/params.hpp"
#include "weft/model/weight_grads.hpp"

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
    // Called between the large kernels inside a block, forward and backward: a chance to move
    // along whatever the access object has in flight (a parameter gather, a gradient
    // reduction) that would otherwise only advance at the next unit.
    virtual void progress() {}
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

// `w` as it is, except that no unit's gradients are signalled ready: the access a split
// backward's B runs through, whose units are complete only after their W (a data-parallel
// reduction started at B would miss them).
class HoldGradsReady : public UnitAccess {
  public:
    explicit HoldGradsReady(UnitAccess& w) : w_(w) {}
    float* params(int unit) override { return w_.params(unit); }
    float* grads(int unit) override { return w_.grads(unit); }
    void release(int unit) override { w_.release(unit); }
    void progress() override { w_.progress(); }

  private:
    UnitAccess& w_;
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
    // The shard of the model that runs it: buffers are sized for tensor-parallel degree `tp`
    // and, with sequence parallelism, for B*T/tp rows of the residual stream (which B*T must
    // divide). Model::activation_span fills these in from the model.
    int tp = 1;
    bool sequence_parallel = false;
    // Ulysses context parallelism (and the hybrid): each layer's forward keeps the whole-sequence
    // q, k, v and out of this rank's heads until its backward (cp_attention.hpp), as many values
    // as the layer's own q, k, v and out of its rows (bf16 under bf16); counted with the
    // activations.
    bool ulysses_kept = false;
    // The run's matrix products are bf16 (--dtype bf16): a family may store the activations that
    // only those products read as bf16 (GPT-2: docs/performance.md). Model::activation_span
    // fills it in from kernels::matmul_precision().
    bool bf16 = false;
    // A zero-bubble schedule splits the backward: from its B to its W each block also holds a
    // copy of the output gradient of each product whose weight gradient waits (weight_grads.hpp).
    // Counted by model::activation_floats, not by the family.
    bool deferred_weights = false;

    // Layers of the span in a model of n_layer (resolving count = -1).
    int layers(int64_t n_layer) const { return count < 0 ? int(n_layer) - first : count; }
};

// What one micro-batch keeps from forward for backward, the part every family shares: the
// tokens, the residual stream between layers and the per-token losses. Shapes for
// tensor-parallel degree tp and rows() rows of the residual stream (B*T, or B*T/tp with sequence
// parallelism: this rank's contiguous block of the flattened [B*T, C] tokens). A family derives
// from it to add the buffers its layers keep (Model::new_activations builds the right one).
struct Activations {
    Activations(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span);
    virtual ~Activations() = default;

    int64_t B, T;
    int first_layer, n_layers;
    bool head, recompute;
    int tp;
    bool sequence_parallel;                // only with tp > 1
    std::vector<int32_t> inputs, targets;  // [B*T], every row on every rank
    // The absolute position of each of a sequence's T rows; empty: 0 .. T-1. Under context
    // parallelism a rank holds two zigzag chunks of every sequence (set_context_parallel), and
    // the position embedding and rotary angles read their positions from here. Packed
    // documents (cu_seqlens) give every row of the batch its own: B*T positions, restarting at
    // each document.
    std::vector<int64_t> positions;
    // Packed documents (--pack documents): where each document starts in the flattened B*T
    // rows, then B*T (kernels/attention/varlen.hpp); attention stays inside each. Under context
    // parallelism, over the whole sequences' rows: B * T * cp. Empty: every row is one
    // sequence.
    std::vector<int64_t> cu_seqlens;
    // The per-document zigzag under the rings (CpAttentionShape::doc_blocks): this rank's rows of
    // each sequence are its pieces of the sequence's documents, and entry b * cp + k lists the
    // kernel calls of its queries in sequence b against cp rank k's keys (TokenRing: of rank k's
    // queries against its keys; entry b alone, its own keys', when no document is on two ranks:
    // the ring does not turn). Empty: the rows' zigzag.
    std::vector<std::vector<CpDocBlock>> cp_doc_blocks;
    // The per-document zigzag under Ulysses (CpAttentionShape::doc_order): where the gather
    // puts each cp rank's rows so that every document is whole again. Empty: the rows' zigzag.
    CpDocOrder cp_doc_order;
    // The position of row r of the flattened B*T (positions listed: one a sequence row, or one
    // a batch row).
    int64_t position(int64_t r) const { return positions[size_t(r) % positions.size()]; }
    // The gradient scale of the training loss for this micro-batch (Model::forward's loss_scale,
    // set by whoever runs the blocks; 0: not training). Losses computed inside a block (the MoE
    // router's) are scaled by it, as the head's are.
    float loss_scale = 0;
    // [n_layers + 1, rows, C]: the input of each layer of the span, then the output of its last.
    Buffer resid;
    Buffer losses;  // head only: [B*T] per-token loss, every row on every rank
    // Distillation (weft train --teacher): a teacher's logits for the B*T rows, which the head's
    // training loss then mixes in (kernels/distill_rows.hpp); evaluation keeps the plain loss.
    // Whoever fills the inputs sets it, one process, every row on it (no tp, cp or pp).
    kernels::SoftTargets soft_targets;
    // Per layer of the span: the weight gradients its split backward's B left for its W
    // (Model::block_backward_input); empty otherwise.
    std::vector<WeightGradQueue> weight_grads;

    int64_t rows() const { return rows_; }
    // Row of resid holding the input of `layer` (layer == first + n_layers: the span's output).
    float* resid_in(int layer) { return resid.data() + (layer - first_layer) * rows_ * n_embd_; }
    const float* resid_in(int layer) const {
        return resid.data() + (layer - first_layer) * rows_ * n_embd_;
    }
    // Floats of the residual stream at one layer boundary (what a pipeline stage sends).
    int64_t boundary_floats() const { return rows_ * n_embd_; }
    int slot(int layer) const { return recompute ? 0 : layer - first_layer; }
    // Floats the shared part holds (resid, losses, and the int32 inputs and targets counted as
    // one float each), and what Ulysses keeps per layer for the span's layers (one layer's worth
    // under recomputation, which re-runs each layer's forward just before its backward): the
    // families' activation counts add their buffers to it.
    static int64_t shared_floats(const ModelConfig& cfg, int64_t B, int64_t T,
                                 const LayerSpan& span);

  private:
    int64_t n_embd_, rows_;
};

class KvPool;
struct RowBatch;
class RowProducts;
class CpAttention;

class Model {
  public:
    virtual ~Model();

    const ModelConfig& config() const { return cfg_; }
    const ParamLayout& layout() const { return layout_; }
    int tp_size() const { return tp_size_; }
    bool sequence_parallel() const { return sp_; }
    // `span` with this model's tensor-parallel degree and sequence parallelism filled in: what
    // the Activations it runs must be built with.
    LayerSpan activation_span(LayerSpan span = {}) const;
    // The family's Activations for a micro-batch of B sequences of T tokens over `span` (whose
    // tp and sequence parallelism activation_span fills in).
    virtual std::unique_ptr<Activations> new_activations(int64_t B, int64_t T,
                                                         LayerSpan span) const = 0;

    // Full forward of one micro-batch. With `train`, the head's backward runs fused with the loss
    // (its gradient scaled by `loss_scale`, e.g. 1 / tokens of the global batch) and what
    // backward needs is kept. Returns the sum of the per-token losses (of the whole micro-batch
    // on every rank of a tensor-parallel group).
    double forward(Activations& a, UnitAccess& w, bool train, float loss_scale);
    void backward(Activations& a, UnitAccess& w);

    // The steps that forward and backward are made of, for schedules that interleave them.
    // `pos0` shifts the positions (generation).
    virtual void embed_forward(Activations& a, UnitAccess& w, int64_t pos0 = 0) = 0;
    virtual void block_forward(Activations& a, UnitAccess& w, int layer) = 0;
    virtual double head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale) = 0;
    virtual void head_backward(Activations& a, UnitAccess& w) = 0;
    virtual void block_backward(Activations& a, UnitAccess& w, int layer) = 0;
    virtual void embed_backward(Activations& a, UnitAccess& w) = 0;
    // block_backward in two halves, for the zero-bubble pipeline schedules: B, the gradient of
    // the layer's input (into dresid, as block_backward), with the layer's weight gradients
    // queued in `a`; then W, which computes them and signals the unit's gradients ready. The
    // gradients are block_backward's bit for bit. Between a layer's B and W, `a` must stay as
    // it is: no recomputation (LayerSpan::recompute) refills the layer's buffers.
    void block_backward_input(Activations& a, UnitAccess& w, int layer);
    void block_backward_weight(Activations& a, UnitAccess& w, int layer);
    // B alone, for a frozen model whose weights never step (PPD's prompt tokens): its W is
    // dropped as B defers it, so no output gradient is copied or kept for a W that never comes
    // (30 layers of them were a quarter of a 135M model's PPD training memory).
    void block_backward_frozen(Activations& a, UnitAccess& w, int layer);

    // Serving and generation: one forward over the rows of several sequences at once
    // (row_batch.hpp), each at its own positions with its keys and values in `kv`. Every product
    // goes through `mm` (row_products.hpp), norms, the rotary embedding and activations run per
    // row, attention per sequence over its own keys (attend_rows), and experts are routed per
    // row with no capacity limit: a row's bits do not depend on the other rows of the batch.
    // logits [b.logit_rows.size(), vocab_size]: those rows' logits, in order, on every rank.
    // Under tensor parallelism (not sequence parallel) every rank runs every row on its heads
    // and MLP columns, `kv` holding its kv heads, through the regions' *_rows (tp_regions.hpp).
    virtual void forward_rows(const RowBatch& b, UnitAccess& w, KvPool& kv, RowProducts& mm,
                              float* logits) = 0;
    // Context parallelism: each sequence of T_global tokens is split over the ranks of `cp`
    // (which must outlive the model) and attention runs as a ring over them, or with `ulysses`
    // as all-to-alls over heads (which this rank's heads and kv heads must divide by). With
    // `ring` too (the hybrid), `cp` is this rank's Ulysses group and `ring` the ring across the
    // groups (cp_attention.hpp). Activations then hold T_global / cp_size() rows per sequence at
    // the positions context_positions() gives. `bidirectional`: the ring as TokenRing.
    void set_context_parallel(CpComm* cp, int64_t T_global, bool ulysses = false,
                              CpComm* ring = nullptr, bool bidirectional = false);
    int cp_size() const;
    // Floats of scratch the context-parallel region holds for micro-batches of B sequences of T
    // local rows (CpAttention::scratch_floats); 0 without context parallelism.
    int64_t cp_scratch_floats(int64_t B, int64_t T) const;
    // Positions of a sequence one attention kernel call sees for T_local rows a rank: all of
    // them, or under context parallelism its region's (cp_call_length).
    int64_t attention_call_length(int64_t T_local) const;
    // This rank's positions of a sequence under context parallelism.
    std::vector<int64_t> context_positions() const;

    // Mixture-of-experts layers: the group their routing counts are summed over (the ranks that
    // split the batch; null: this process alone; must outlive the model), and the routing
    // statistics of the training forwards since the last take (n_experts 0 for a dense model).
    void set_moe_comm(MoeComm* comm) { moe_comm_ = comm; }
    virtual MoeStats take_moe_stats() { return {}; }
    // Expert parallelism: the layers hold this rank's experts (ModelShard::ep_rank) and reach the
    // others through `comm` (must outlive the model). A dense model has nothing to split.
    virtual void set_expert_comm(ExpertComm*) {}
    // Aux-loss-free balancing (state, not a parameter: no gradient): after a step, every MoE
    // layer's selection bias moves against the load of that step's routing `s` (counts over
    // every rank, so every rank moves alike). Returns the largest |bias| after the move, or
    // nothing when the model does not balance (dense, or a rate of 0).
    virtual std::optional<double> balance_routers(const MoeStats&) { return std::nullopt; }
    // The balancing state a checkpoint keeps, [n_layer, n_experts] (empty when the model does
    // not balance), and its restore; `from` names the checkpoint in errors.
    virtual std::vector<float> router_bias() const { return {}; }
    virtual void set_router_bias(const std::vector<float>& /*saved*/, const std::string& /*from*/) {
    }

    // Floats per position of one layer's cached keys (and of its values): this rank's kv heads.
    virtual int64_t kv_width() const = 0;

    // The gradient of the residual stream during backward: a pipeline stage writes the gradient
    // of its chunk's output here before the chunk's backward (then calls block_backward from
    // the chunk's last layer down) and reads the gradient of the chunk's input from it after.
    // [B*T, C] of the micro-batch being run; with sequence parallelism, this rank's rows:
    // [B*T/tp, C], as Activations::resid.
    virtual float* dresid(int64_t B, int64_t T) = 0;

  protected:
    // `tp_size`: the tensor-parallel group's size (1 without one); shard.tp must equal it.
    Model(const ModelConfig& cfg, const ModelShard& shard, int tp_size, int tp_rank,
          bool sequence_parallel);
    void check_activations(const Activations& a) const;
    // The embedding's activations (layer 0, positions pos0 .. pos0 + T inside the model).
    void check_embedding(const Activations& a, int64_t pos0) const;
    // forward_rows' batch: no sequence or context parallelism, positions inside the model.
    void check_rows(const RowBatch& b) const;

    ModelConfig cfg_;
    ParamLayout layout_;
    int tp_size_ = 1, tp_rank_ = 0;
    bool sp_ = false;
    std::unique_ptr<CpAttention> cp_;  // context parallel only
    MoeComm* moe_comm_ = nullptr;
};

}  // namespace weft::model
