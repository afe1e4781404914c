#include "weft/model/model.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::model {

namespace {

int64_t span_rows(int64_t B, int64_t T, const LayerSpan& span) {
    const int64_t BT = B * T, tp = span.tp;
    const bool sp = span.sequence_parallel && tp > 1;
    WEFT_CHECK(!sp || BT % tp == 0,
               "sequence parallelism splits the {} x {} = {} tokens of a micro-batch over {} "
               "tensor-parallel ranks: micro-batch size times sequence length must be a multiple "
               "of --tp",
               B, T, BT, tp);
    return sp ? BT / tp : BT;
}

void check_span(const ModelConfig& cfg, int64_t T, const LayerSpan& span) {
    WEFT_CHECK(T <= cfg.n_positions, "sequence length {} exceeds the model's n_positions {}", T,
               cfg.n_positions);
    const int n = span.layers(cfg.n_layer);
    WEFT_CHECK(span.first >= 0 && n >= 0 && span.first + n <= cfg.n_layer,
               "internal: layers {}..{} of a model of {}", span.first, span.first + n, cfg.n_layer);
    WEFT_CHECK(span.tp >= 1, "internal: tensor-parallel degree {}", span.tp);
}

}  // namespace

Activations::Activations(const ModelConfig& cfg, int64_t B_, int64_t T_, LayerSpan span)
    : B(B_),
      T(T_),
      first_layer(span.first),
      n_layers(span.layers(cfg.n_layer)),
      head(span.head),
      recompute(span.recompute),
      tp(span.tp),
      sequence_parallel(span.sequence_parallel && span.tp > 1),
      n_embd_(cfg.n_embd) {
    check_span(cfg, T, span);
    rows_ = span_rows(B, T, span);
    inputs.assign(size_t(B * T), 0);
    targets.assign(size_t(B * T), -1);
    resid = Buffer((n_layers + 1) * rows_ * n_embd_);
    if (head) losses = Buffer(B * T);
}

int64_t Activations::shared_floats(const ModelConfig& cfg, int64_t B, int64_t T,
                                   const LayerSpan& span) {
    check_span(cfg, T, span);
    const int64_t rows = span_rows(B, T, span), tokens = B * T;
    const int n = span.layers(cfg.n_layer);
    // Ulysses' whole sequence of heads/cp heads is T/cp rows' worth of all heads: attention runs
    // on every local row (gathered under sequence parallelism), over this tp rank's heads; kept
    // as bf16 under bf16 (CpAttention::forward on bf16), half the floats.
    const int kept = span.ulysses_kept ? (span.recompute ? std::min(n, 1) : n) : 0;
    const int64_t heads = 2 * (cfg.n_head / span.tp + cfg.kv_heads() / span.tp);
    return (n + 1) * rows * cfg.n_embd + (span.head ? tokens : 0) + 2 * tokens +
           kept * tokens * heads * cfg.head_dim() / (span.bf16 ? 2 : 1);
}

Model::Model(const ModelConfig& cfg, const ModelShard& shard, int tp_size, int tp_rank,
             bool sequence_parallel)
    : cfg_(cfg), tp_size_(tp_size), tp_rank_(tp_rank), sp_(sequence_parallel && tp_size > 1) {
    cfg_.validate("model config");
    layout_ = build_param_layout(cfg_, shard);
    WEFT_CHECK(shard.tp == tp_size_ && shard.tp_rank == tp_rank_,
               "internal: a model shard of tensor-parallel rank {} of {} on a group where this is "
               "rank {} of {}",
               shard.tp_rank, shard.tp, tp_rank_, tp_size_);
}

Model::~Model() = default;

void Model::set_context_parallel(CpComm* cp, int64_t T_global, bool ulysses, CpComm* ring,
                                 bool bidirectional) {
    if (!cp || (cp->size() == 1 && !ring)) {
        cp_.reset();
        return;
    }
    const int64_t NH = cfg_.n_head / tp_size_, NKV = cfg_.kv_heads() / tp_size_;
    WEFT_CHECK(ring || !ulysses || (NH % cp->size() == 0 && NKV % cp->size() == 0),
               "--cp-kind ulysses splits the attention heads over --cp {}: this rank's {} heads "
               "and {} key/value heads (of {} and {} over --tp {}) must both be multiples of it "
               "(weft refuses rather than replicates key/value heads; use --cp-kind ring, or a "
               "cp dividing both)",
               cp->size(), NH, NKV, cfg_.n_head, cfg_.kv_heads(), tp_size_);
    WEFT_CHECK(!ring || (NH % cp->size() == 0 && NKV % cp->size() == 0),
               "--cp-kind hybrid splits the attention heads over --cp-ulysses {}: this rank's {} "
               "heads and {} key/value heads (of {} and {} over --tp {}) must both be multiples "
               "of it (use a smaller --cp-ulysses, or --cp-kind ring)",
               cp->size(), NH, NKV, cfg_.n_head, cfg_.kv_heads(), tp_size_);
    cp_ = std::make_unique<CpAttention>(*cp, T_global, ulysses, ring, bidirectional);
}

int Model::cp_size() const {
    return cp_ ? cp_->size() : 1;
}

int64_t Model::cp_scratch_floats(int64_t B, int64_t T) const {
    if (!cp_) return 0;
    return CpAttention::scratch_floats(cp_->region(), B, T, cfg_.n_head / tp_size_,
                                       cfg_.kv_heads() / tp_size_, cfg_.head_dim(),
                                       cp_->ulysses_group(), activation_span().bf16);
}

int64_t Model::attention_call_length(int64_t T_local) const {
    return cp_ ? cp_call_length(cp_->region(), T_local, cp_->size(), cp_->ulysses_group())
               : T_local;
}

std::vector<int64_t> Model::context_positions() const {
    WEFT_CHECK(cp_, "internal: context positions without context parallelism");
    return cp_->positions();
}

LayerSpan Model::activation_span(LayerSpan span) const {
    span.tp = tp_size_;
    span.sequence_parallel = sp_;
    span.ulysses_kept = cp_ && cp_->ulysses();
    span.bf16 = kernels::matmul_precision() == kernels::MatmulPrecision::bf16;
    return span;
}

void Model::check_activations(const Activations& a) const {
    WEFT_CHECK(a.tp == tp_size_ && a.sequence_parallel == sp_,
               "internal: activations built for tensor-parallel degree {}{} run on a model of "
               "degree {}{} (build them with Model::new_activations)",
               a.tp, a.sequence_parallel ? " with sequence parallelism" : "", tp_size_,
               sp_ ? " with sequence parallelism" : "");
}

void Model::check_embedding(const Activations& a, int64_t pos0) const {
    WEFT_CHECK(a.first_layer == 0, "internal: the embedding feeds layer 0, not {}", a.first_layer);
    check_activations(a);
    WEFT_CHECK(pos0 >= 0 && pos0 + a.T <= cfg_.n_positions,
               "internal: positions {}..{} of a model of {}", pos0, pos0 + a.T, cfg_.n_positions);
}

void Model::check_rows(const RowBatch& b) const {
    WEFT_CHECK(!sp_ && !cp_, "internal: a forward over rows with sequence or context parallelism");
    for (const RowSeq& s : b.seqs)
        WEFT_CHECK(s.pos0 >= 0 && s.pos0 + s.rows <= cfg_.n_positions,
                   "internal: a forward of positions {}..{} (expected within {} positions)", s.pos0,
                   s.pos0 + s.rows, cfg_.n_positions);
    for (int32_t t : b.tokens)
        WEFT_CHECK(t >= 0 && t < cfg_.vocab_size + (b.extra ? b.extra_count : 0),
                   "internal: a row of id {} (vocabulary {}, {} extra inputs)", t, cfg_.vocab_size,
                   b.extra_count);
}

double Model::forward(Activations& a, UnitAccess& w, bool train, float loss_scale) {
    a.loss_scale = train ? loss_scale : 0.0f;
    embed_forward(a, w);
    for (int l = 0; l < cfg_.n_layer; ++l) block_forward(a, w, l);
    return head_forward(a, w, train, loss_scale);
}

void Model::block_backward_input(Activations& a, UnitAccess& w, int layer) {
    WEFT_CHECK(!a.recompute,
               "internal: a split backward with recomputation (the W would read the buffers "
               "the next layer's recomputation overwrites)");
    if (a.weight_grads.empty()) a.weight_grads.resize(size_t(a.n_layers));
    WeightGradQueue& q = a.weight_grads[size_t(layer - a.first_layer)];
    WEFT_CHECK(q.empty(), "internal: layer {}'s B ran again before its W", layer);
    DeferWeightGrads scope(q);
    HoldGradsReady held(w);
    block_backward(a, held, layer);
}

void Model::block_backward_frozen(Activations& a, UnitAccess& w, int layer) {
    WeightGradQueue none(WeightGradQueue::discard);
    DeferWeightGrads scope(none);
    HoldGradsReady held(w);
    block_backward(a, held, layer);
}

void Model::block_backward_weight(Activations& a, UnitAccess& w, int layer) {
    WEFT_CHECK(!a.weight_grads.empty(), "internal: layer {}'s W before its B", layer);
    a.weight_grads[size_t(layer - a.first_layer)].run();
    w.grads_ready(layer + 1);
}

void Model::backward(Activations& a, UnitAccess& w) {
    head_backward(a, w);
    for (int l = int(cfg_.n_layer) - 1; l >= 0; --l) block_backward(a, w, l);
    embed_backward(a, w);
}

}  // namespace weft::model
