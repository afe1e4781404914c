#pragma once
// GPT-2 forward and backward, explicit and layer by layer. What backward needs is kept in an
// Activations value per micro-batch, so a pipeline can hold several micro-batches in flight.
// Parameters and gradients are reached through UnitAccess, one unit (embeddings, a block, the
// final norm) at a time, so that data parallelism can reduce a unit's gradients as soon as they
// are complete and ZeRO-3 can gather a unit's parameters just before they are used.
//
// Tensor parallelism (Megatron-LM's, docs/tensor_parallel.md): with a TpComm of size tp > 1 a
// rank holds 1/tp of each split tensor (ModelShard), runs its NH/tp heads and 4C/tp MLP columns,
// and the model calls the group's collectives itself: one all-reduce per attention and per MLP
// in forward and one each in backward; a vocabulary-parallel embedding and cross-entropy. With
// sequence parallelism the residual stream, the LayerNorms and the head's final norm work on
// this rank's B*T/tp rows, with an all-gather before and a reduce-scatter after each
// tensor-parallel region instead. The model knows no MPI.
#include <cstdint>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"
#include "weft/model/tp_comm.hpp"

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
    // divide). Gpt2::activation_span fills these in from the model.
    int tp = 1;
    bool sequence_parallel = false;
};

// Everything one micro-batch keeps from forward for backward. Shapes for tensor-parallel degree
// tp (1: the whole model) and rows() rows of the residual stream (B*T, or B*T/tp with sequence
// parallelism: this rank's contiguous block of the flattened [B*T, C] tokens).
struct Activations {
    Activations(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});
    // Floats these buffers hold for (cfg, B, T, span): the analytic count the memory estimate
    // uses.
    static int64_t floats(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span = {});

    int64_t B, T;
    int first_layer, n_layers;
    bool head, recompute;
    int tp;
    bool sequence_parallel;                // only with tp > 1
    std::vector<int32_t> inputs, targets;  // [B*T], every row on every rank
    // [n_layers + 1, rows, C]: the input of each layer of the span, then the output of its last.
    Buffer resid;
    // Per layer of the span (one layer when recomputing), indexed by slot(layer):
    //   ln1, ln2            [B*T, C]   input of the column-parallel projection (sequence
    //                                  parallel: the all-gathered LayerNorm outputs)
    //   ln*_mean, ln*_rstd  [rows]
    //   qkv [B*T, 3C/tp], atty [B*T, C/tp], lse [B, NH/tp, T], fch, fch_gelu [B*T, 4C/tp]
    //   resid2              [rows, C]
    Buffer ln1, ln1_mean, ln1_rstd, qkv, atty, lse, resid2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
    // Head only. lnf [B*T, C] (gathered under sequence parallelism), its statistics [rows].
    Buffer lnf, lnf_mean, lnf_rstd;
    Buffer dlnf;    // [rows, C] gradient of the final norm's output, from the fused head
    Buffer losses;  // [B*T] per-token loss, every row on every rank

    int64_t rows() const { return rows_; }
    // Row of resid holding the input of `layer` (layer == first + n_layers: the span's output).
    float* resid_in(int layer) { return resid.data() + (layer - first_layer) * rows_ * n_embd_; }
    int slot(int layer) const { return recompute ? 0 : layer - first_layer; }

  private:
    int64_t n_embd_, rows_;
};

// The keys and values of the positions a generated sequence has seen: [n_layer, n_positions, C]
// each.
struct KvCache {
    explicit KvCache(const ModelConfig& cfg);
    Buffer k, v;
};

class Gpt2 {
  public:
    // `tp`: this rank's tensor-parallel group (null: no tensor parallelism), whose size and rank
    // must be shard.tp and shard.tp_rank; it must outlive the model. The config's padded
    // vocabulary must divide by tp (config_for_tp). sequence_parallel is ignored at tp = 1.
    explicit Gpt2(const ModelConfig& cfg, const ModelShard& shard = {}, TpComm* tp = nullptr,
                  bool sequence_parallel = false);
    const ModelConfig& config() const { return cfg_; }
    const ParamLayout& layout() const { return layout_; }
    int tp_size() const { return tp_size_; }
    bool sequence_parallel() const { return sp_; }
    // `span` with this model's tensor-parallel degree and sequence parallelism filled in: what
    // the Activations it runs must be built with.
    LayerSpan activation_span(LayerSpan span = {}) const;

    // Full forward of one micro-batch. With `train`, the head's backward runs fused with the loss
    // (its gradient scaled by `loss_scale`, e.g. 1 / tokens of the global batch) and what
    // backward needs is kept. Returns the sum of the per-token losses (of the whole micro-batch
    // on every rank of a tensor-parallel group).
    double forward(Activations& a, UnitAccess& w, bool train, float loss_scale);
    void backward(Activations& a, UnitAccess& w);

    // The steps that forward and backward are made of, for schedules that interleave them.
    // `pos0` shifts the positions (generation).
    void embed_forward(Activations& a, UnitAccess& w, int64_t pos0 = 0);
    void block_forward(Activations& a, UnitAccess& w, int layer);
    double head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale);
    void head_backward(Activations& a, UnitAccess& w);
    void block_backward(Activations& a, UnitAccess& w, int layer);
    void embed_backward(Activations& a, UnitAccess& w);

    // Generation with a KV cache (tp = 1, B = 1): the layer's forward of a's T tokens at
    // positions pos0 .. pos0 + T - 1 (embedded with embed_forward(a, w, pos0)); their keys and
    // values join those `cache` holds for the positions before, and their queries attend to all.
    // The same block forward as training, but for the attention's keys and values.
    void block_forward_cached(Activations& a, UnitAccess& w, int layer, KvCache& cache,
                              int64_t pos0);

    // The gradient of the residual stream during backward: a pipeline stage writes the gradient
    // of its chunk's output here before the chunk's backward (then calls block_backward from
    // the chunk's last layer down) and reads the gradient of the chunk's input from it after.
    // [B*T, C] of the micro-batch being run; with sequence parallelism, this rank's rows:
    // [B*T/tp, C], as Activations::resid.
    float* dresid(int64_t B, int64_t T);

    // Floats of scratch the model holds (shared by all micro-batches), for tensor-parallel degree
    // tp. With tp > 1 the head's logits are the model's too: add
    // kernels::classifier_shard_scratch_floats(B*T, padded vocabulary / tp) on the rank with the
    // head, in place of the fused kernel's classifier_scratch_floats.
    static int64_t scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp = 1,
                                  bool sequence_parallel = false);

  private:
    void ensure_scratch(int64_t BT);
    void check_activations(const Activations& a) const;
    // The layer's forward from its parameters, into the micro-batch's buffers; with a cache,
    // attending to its keys and values too (block_forward_cached).
    void block_forward_from(Activations& a, const BlockView& p, int layer, UnitAccess& w,
                            KvCache* cache = nullptr,
                            int64_t pos0 = 0);

    // Tensor-parallel steps; at tp = 1 each is what the single-process model does.
    // This rank's rows of a [B*T, C] buffer (all of them unless sequence parallel).
    float* own_rows(float* full, int64_t rows) const;
    // Sequence parallel: every rank's `rows` rows of `full`, in place (the forward of g, which
    // takes f's place before a column-parallel region; docs/tensor_parallel.md names them).
    void gather_rows(float* full, int64_t rows);
    // out[rows, C] = (in · wᵀ summed over the ranks) + b + resid: a row-parallel projection and
    // the residual connection (g: all-reduce; sequence parallel ḡ: reduce-scatter to this rank's
    // rows).
    void row_parallel_forward(const Activations& a, float* out, const float* in, const float* w,
                              const float* b, const float* resid, int64_t K);
    // The gradient of a row-parallel region's output for all B*T rows: dres, or under sequence
    // parallelism its rows gathered from every rank (ḡ's backward).
    const float* gather_grad(const float* dres, int64_t rows);
    // Sums dC_, a column-parallel region's partial input gradient, over the ranks (f's backward
    // in place, or sequence parallel g's: reduce-scattered to this rank's rows); returns it.
    const float* sum_input_grad(int64_t BT, int64_t rows);
    // Sequence parallel: adds ln_grads_[count * C], this micro-batch's gradients of replicated
    // tensors from this rank's rows only, summed over the ranks, into dst[i] (C floats each).
    void add_replicated_grads(float* const* dst, int count);
    // The vocabulary-parallel head on a.lnf (every row): losses, and with `train` dwte's shard
    // and a.dlnf.
    void vocab_parallel_head(Activations& a, const float* wte, float* dwte, bool train,
                             float scale);

    ModelConfig cfg_;
    ParamLayout layout_;
    TpComm* tp_ = nullptr;
    int tp_size_ = 1, tp_rank_ = 0;
    bool sp_ = false;
    // This rank's slice of the padded vocabulary starts at v0_ and has vs_ rows, vr_ of them real.
    int64_t v0_ = 0, vs_ = 0, vr_ = 0;
    int64_t scratch_bt_ = 0;
    // Backward scratch: residual gradient [rows, C] and per-width temps [B*T, C], [B*T, 3C/tp],
    // [B*T, 4C/tp]. With tp > 1 dC_ also takes the partial sums of forward's row-parallel
    // products under sequence parallelism and the gathered gradients in backward.
    Buffer dres_, dC_, d3C_, d4C_;
    Buffer ln_grads_;                  // sequence parallel: [4C] partial LayerNorm gradients
    Buffer head_logits_, head_stats_;  // tp > 1: one chunk of logits, its row maxima and sums
};

}  // namespace weft::model
