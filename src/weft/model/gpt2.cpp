#include "weft/model/gpt2.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/classifier_parallel.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/gelu.hpp"
#include "weft/kernels/layernorm.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

// The sizes of one Activations value, in floats: the constructor allocates them and floats()
// adds them up, so the memory estimate cannot drift from what is allocated.
struct ActivationSizes {
    int64_t n_layers, kept;  // layers of the span; layers with buffers (1 when recomputing)
    int64_t rows;            // rows of the residual stream this rank holds
    int64_t resid;           // one layer's input
    int64_t ln, stats, qkv, atty, lse, resid2, fch;  // per kept layer, each tensor
    int64_t lnf, lnf_stats, dlnf, losses;            // head
    int64_t tokens;
};

ActivationSizes activation_sizes(const ModelConfig& cfg, int64_t B, int64_t T,
                                 const LayerSpan& span) {
    const int64_t BT = B * T, C = cfg.n_embd, NH = cfg.n_head, tp = span.tp;
    WEFT_CHECK(T <= cfg.n_positions, "sequence length {} exceeds the model's n_positions {}", T,
               cfg.n_positions);
    const int64_t n = span.count < 0 ? cfg.n_layer - span.first : span.count;
    WEFT_CHECK(span.first >= 0 && n >= 0 && span.first + n <= cfg.n_layer,
               "internal: layers {}..{} of a model of {}", span.first, span.first + n, cfg.n_layer);
    WEFT_CHECK(tp >= 1 && NH % tp == 0,
               "{} attention heads do not split over tensor-parallel degree {}: the head count "
               "must be a multiple of --tp",
               NH, tp);
    const bool sp = span.sequence_parallel && tp > 1;
    WEFT_CHECK(!sp || BT % tp == 0,
               "sequence parallelism splits the {} x {} = {} tokens of a micro-batch over {} "
               "tensor-parallel ranks: micro-batch size times sequence length must be a multiple "
               "of --tp",
               B, T, BT, tp);
    ActivationSizes s;
    s.n_layers = n;
    s.kept = span.recompute ? std::min<int64_t>(1, n) : n;
    s.rows = sp ? BT / tp : BT;
    s.resid = s.rows * C;
    s.ln = BT * C;
    s.stats = s.rows;
    s.qkv = BT * 3 * C / tp;
    s.atty = BT * C / tp;
    s.lse = B * (NH / tp) * T;
    s.resid2 = s.rows * C;
    s.fch = BT * 4 * C / tp;
    s.lnf = span.head ? BT * C : 0;
    s.lnf_stats = span.head ? s.rows : 0;
    s.dlnf = span.head ? s.rows * C : 0;
    s.losses = span.head ? BT : 0;
    s.tokens = BT;
    return s;
}

}  // namespace

Activations::Activations(const ModelConfig& cfg, int64_t B_, int64_t T_, LayerSpan span)
    : B(B_),
      T(T_),
      first_layer(span.first),
      n_layers(span.count < 0 ? int(cfg.n_layer) - span.first : span.count),
      head(span.head),
      recompute(span.recompute),
      tp(span.tp),
      sequence_parallel(span.sequence_parallel && span.tp > 1),
      n_embd_(cfg.n_embd) {
    const ActivationSizes s = activation_sizes(cfg, B, T, span);
    const int64_t L = s.kept;
    rows_ = s.rows;
    inputs.assign(size_t(s.tokens), 0);
    targets.assign(size_t(s.tokens), -1);
    resid = Buffer((s.n_layers + 1) * s.resid);
    ln1 = Buffer(L * s.ln);
    ln1_mean = Buffer(L * s.stats);
    ln1_rstd = Buffer(L * s.stats);
    qkv = Buffer(L * s.qkv);
    atty = Buffer(L * s.atty);
    lse = Buffer(L * s.lse);
    resid2 = Buffer(L * s.resid2);
    ln2 = Buffer(L * s.ln);
    ln2_mean = Buffer(L * s.stats);
    ln2_rstd = Buffer(L * s.stats);
    fch = Buffer(L * s.fch);
    fch_gelu = Buffer(L * s.fch);
    if (head) {
        lnf = Buffer(s.lnf);
        lnf_mean = Buffer(s.lnf_stats);
        lnf_rstd = Buffer(s.lnf_stats);
        dlnf = Buffer(s.dlnf);
        losses = Buffer(s.losses);
    }
}

int64_t Activations::floats(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span) {
    const ActivationSizes s = activation_sizes(cfg, B, T, span);
    // Per kept layer: ln1, ln2, qkv, atty, resid2, fch, fch_gelu, four LayerNorm statistics and
    // the attention log-sum-exp (at tp = 1: 15 C per token, 4 per token, NH per token); plus
    // each layer's input and the span's output; the head's final norm, its gradient, statistics
    // and losses; the int32 inputs and targets count as one float each.
    const int64_t per_layer =
        2 * s.ln + s.qkv + s.atty + s.resid2 + 2 * s.fch + 4 * s.stats + s.lse;
    const int64_t head = s.lnf + 2 * s.lnf_stats + s.dlnf + s.losses;
    return s.kept * per_layer + (s.n_layers + 1) * s.resid + head + 2 * s.tokens;
}

Gpt2::Gpt2(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp, bool sequence_parallel)
    : cfg_(cfg), layout_(build_param_layout(cfg, shard)), tp_(tp) {
    cfg_.validate("model config");
    tp_size_ = tp ? tp->size() : 1;
    WEFT_CHECK(shard.tp == tp_size_ && (!tp || shard.tp_rank == tp->rank()),
               "internal: a model shard of tensor-parallel rank {} of {} on a group where this is "
               "rank {} of {}",
               shard.tp_rank, shard.tp, tp ? tp->rank() : 0, tp_size_);
    tp_rank_ = shard.tp_rank;
    sp_ = sequence_parallel && tp_size_ > 1;
    vs_ = cfg_.padded_vocab() / tp_size_;
    v0_ = int64_t(tp_rank_) * vs_;
    vr_ = std::clamp<int64_t>(cfg_.vocab_size - v0_, 0, vs_);
}

LayerSpan Gpt2::activation_span(LayerSpan span) const {
    span.tp = tp_size_;
    span.sequence_parallel = sp_;
    return span;
}

int64_t Gpt2::scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp,
                             bool sequence_parallel) {
    const bool sp = sequence_parallel && tp > 1;
    const int64_t BT = B * T, C = cfg.n_embd, rows = sp ? BT / tp : BT;
    // dres_, dC_, d3C_, d4C_, and the partial LayerNorm gradients.
    return rows * C + BT * C + BT * 3 * C / tp + BT * 4 * C / tp + (sp ? 4 * C : 0);
}

void Gpt2::ensure_scratch(int64_t BT) {
    if (scratch_bt_ >= BT) return;
    const int64_t C = cfg_.n_embd, tp = tp_size_;
    dres_ = Buffer((sp_ ? BT / tp : BT) * C);
    dC_ = Buffer(BT * C);
    d3C_ = Buffer(BT * 3 * C / tp);
    d4C_ = Buffer(BT * 4 * C / tp);
    if (sp_) ln_grads_ = Buffer(4 * C);
    scratch_bt_ = BT;
}

void Gpt2::check_activations(const Activations& a) const {
    WEFT_CHECK(a.tp == tp_size_ && a.sequence_parallel == sp_,
               "internal: activations built for tensor-parallel degree {}{} run on a model of "
               "degree {}{} (build them with Gpt2::activation_span)",
               a.tp, a.sequence_parallel ? " with sequence parallelism" : "", tp_size_,
               sp_ ? " with sequence parallelism" : "");
}

float* Gpt2::dresid(int64_t B, int64_t T) {
    ensure_scratch(B * T);
    return dres_.data();
}

float* Gpt2::own_rows(float* full, int64_t rows) const {
    return sp_ ? full + int64_t(tp_rank_) * rows * cfg_.n_embd : full;
}

void Gpt2::gather_rows(float* full, int64_t rows) {
    if (!sp_) return;
    const int64_t n = rows * cfg_.n_embd;
    tp_->all_gather(full + int64_t(tp_rank_) * n, full, n);
}

void Gpt2::row_parallel_forward(const Activations& a, float* out, const float* in, const float* w,
                                const float* b, const float* resid, int64_t K) {
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, rows = a.rows();
    if (tp_size_ == 1) {
        k::matmul_forward(out, in, w, b, BT, K, C);
        k::add_inplace(out, resid, BT * C);
        return;
    }
    // Each rank's product covers its slice of K, a partial sum; the bias belongs to the sum.
    if (sp_) {
        k::matmul_forward(dC_.data(), in, w, nullptr, BT, K, C);
        tp_->reduce_scatter_sum(dC_.data(), out, rows * C);
    } else {
        k::matmul_forward(out, in, w, nullptr, BT, K, C);
        tp_->all_reduce_sum(out, BT * C);
    }
    k::add_bias_residual(out, b, resid, rows, C);
}

const float* Gpt2::gather_grad(const float* dres, int64_t rows) {
    if (!sp_) return dres;
    tp_->all_gather(dres, dC_.data(), rows * cfg_.n_embd);
    return dC_.data();
}

const float* Gpt2::sum_input_grad(int64_t BT, int64_t rows) {
    const int64_t C = cfg_.n_embd;
    if (tp_size_ == 1) return dC_.data();
    if (!sp_) {
        tp_->all_reduce_sum(dC_.data(), BT * C);
        return dC_.data();
    }
    // d4C_ is free here (its last reader, the column-parallel weight gradient, has run) and
    // holds B*T*4C/tp >= rows*C floats.
    tp_->reduce_scatter_sum(dC_.data(), d4C_.data(), rows * C);
    return d4C_.data();
}

void Gpt2::add_replicated_grads(float* const* dst, int count) {
    const int64_t C = cfg_.n_embd;
    // Only this micro-batch's share is summed: the gradient buffers accumulate over
    // micro-batches, and summing them would count the earlier ones tp times.
    tp_->all_reduce_sum(ln_grads_.data(), count * C);
    for (int i = 0; i < count; ++i) k::add_inplace(dst[i], ln_grads_.data() + i * C, C);
}

void Gpt2::embed_forward(Activations& a, UnitAccess& w, int64_t pos0) {
    WEFT_CHECK(a.first_layer == 0, "internal: the embedding feeds layer 0, not {}", a.first_layer);
    check_activations(a);
    WEFT_CHECK(pos0 >= 0 && pos0 + a.T <= cfg_.n_positions,
               "internal: positions {}..{} of a model of {}", pos0, pos0 + a.T, cfg_.n_positions);
    EmbedView e = embed_view(w.params(0), layout_);
    const int64_t BT = a.B * a.T, C = cfg_.n_embd;
    if (tp_size_ == 1) {
        k::embedding_forward(a.resid_in(0), a.inputs.data(), e.wte, e.wpe, a.B, a.T, C, pos0);
        return;
    }
    // Each rank looks up the tokens of its slice of the vocabulary (zero rows for the others),
    // so the sum over the ranks is the whole lookup; wpe, given on rank 0 only, is in it once.
    ensure_scratch(BT);
    float* partial = sp_ ? dC_.data() : a.resid_in(0);
    k::embedding_forward_shard(partial, a.inputs.data(), e.wte, tp_rank_ == 0 ? e.wpe : nullptr,
                               a.B, a.T, C, v0_, vs_, pos0);
    if (sp_)
        tp_->reduce_scatter_sum(partial, a.resid_in(0), a.rows() * C);
    else
        tp_->all_reduce_sum(partial, BT * C);
}

void Gpt2::block_forward(Activations& a, UnitAccess& w, int l) {
    check_activations(a);
    block_forward_from(a, block_view(w.params(l + 1), layout_, l), l, w);
    w.release(l + 1);
}

KvCache::KvCache(const ModelConfig& cfg)
    : k(cfg.n_layer * cfg.n_positions * cfg.n_embd),
      v(cfg.n_layer * cfg.n_positions * cfg.n_embd) {}

void Gpt2::block_forward_cached(Activations& a, UnitAccess& w, int l, KvCache& cache,
                                int64_t pos0) {
    check_activations(a);
    WEFT_CHECK(tp_size_ == 1 && a.B == 1 && pos0 >= 0 && pos0 + a.T <= cfg_.n_positions,
               "internal: cached generation of positions {}..{} of {} sequences at "
               "tensor-parallel degree {} (expected one sequence within {} positions, tp 1)",
               pos0, pos0 + a.T, a.B, tp_size_, cfg_.n_positions);
    block_forward_from(a, block_view(w.params(l + 1), layout_, l), l, w, &cache, pos0);
    w.release(l + 1);
}

void Gpt2::block_forward_from(Activations& a, const BlockView& p, int l, UnitAccess& w,
                              KvCache* cache,
                              int64_t pos0) {
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    // This rank's heads and MLP columns.
    const int64_t NH = cfg_.n_head / tp_size_, Cl = C / tp_size_, HS = cfg_.head_dim();
    ensure_scratch(BT);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    float* ln1 = a.ln1.data() + s * BT * C;
    float* qkv = a.qkv.data() + s * BT * 3 * Cl;
    float* atty = a.atty.data() + s * BT * Cl;
    float* res2 = a.resid2.data() + s * R * C;
    float* ln2 = a.ln2.data() + s * BT * C;
    float* fch = a.fch.data() + s * BT * 4 * Cl;
    float* fcg = a.fch_gelu.data() + s * BT * 4 * Cl;
    float* out = a.resid_in(l + 1);

    // Attention: the LayerNorm of this rank's rows, then (sequence parallel) every rank's rows,
    // the input of the column-parallel qkv projection.
    k::layernorm_forward(own_rows(ln1, R), a.ln1_mean.data() + s * R, a.ln1_rstd.data() + s * R, x,
                         p.ln1_w, p.ln1_b, R, C, cfg_.ln_eps);
    gather_rows(ln1, R);
    k::matmul_forward(qkv, ln1, p.qkv_w, p.qkv_b, BT, C, 3 * Cl);
    w.progress();
    if (!cache) {
        k::attention_forward_qkv(atty, a.lse.data() + s * B * NH * T, qkv, B, T, NH, HS);
    } else {
        // Generation (tp = 1, one sequence): these positions' keys and values join the cache,
        // and the queries attend to every cached position up to their own.
        const int64_t P = cfg_.n_positions;
        float* kc = cache->k.data() + l * P * C;
        float* vc = cache->v.data() + l * P * C;
        for (int64_t t = 0; t < T; ++t) {
            std::copy_n(qkv + t * 3 * C + C, C, kc + (pos0 + t) * C);
            std::copy_n(qkv + t * 3 * C + 2 * C, C, vc + (pos0 + t) * C);
        }
        const k::AttentionShape shape{1, T, pos0 + T, NH, HS, 3 * C, C, C, pos0};
        k::attention_forward(atty, a.lse.data() + s * B * NH * T, qkv, kc, vc, shape);
    }
    w.progress();
    row_parallel_forward(a, res2, atty, p.proj_w, p.proj_b, x, Cl);
    w.progress();
    // MLP, the same way.
    k::layernorm_forward(own_rows(ln2, R), a.ln2_mean.data() + s * R, a.ln2_rstd.data() + s * R,
                         res2, p.ln2_w, p.ln2_b, R, C, cfg_.ln_eps);
    gather_rows(ln2, R);
    k::matmul_forward(fch, ln2, p.fc_w, p.fc_b, BT, C, 4 * Cl);
    w.progress();
    k::gelu_forward(fcg, fch, BT * 4 * Cl);
    row_parallel_forward(a, out, fcg, p.fcproj_w, p.fcproj_b, res2, 4 * Cl);
}

double Gpt2::head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale) {
    WEFT_CHECK(a.head && a.first_layer + a.n_layers == cfg_.n_layer,
               "internal: the head needs the output of the last layer");
    check_activations(a);
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, L = cfg_.n_layer, R = a.rows();
    FinalView f = final_view(w.params(L + 1), layout_, int(L));
    const float* x = a.resid_in(int(L));
    k::layernorm_forward(own_rows(a.lnf.data(), R), a.lnf_mean.data(), a.lnf_rstd.data(), x,
                         f.lnf_w, f.lnf_b, R, C, cfg_.ln_eps);
    gather_rows(a.lnf.data(), R);
    EmbedView e = embed_view(w.params(0), layout_);
    float* dwte = train ? embed_view(w.grads(0), layout_).wte : nullptr;
    if (tp_size_ == 1) {
        k::classifier_forward_backward(a.losses.data(), train ? a.dlnf.data() : nullptr, dwte,
                                       a.lnf.data(), e.wte, a.targets.data(), BT, C,
                                       cfg_.vocab_size, loss_scale);
    } else {
        vocab_parallel_head(a, e.wte, dwte, train, loss_scale);
    }
    w.release(L + 1);
    w.release(0);
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
    return sum;
}

void Gpt2::vocab_parallel_head(Activations& a, const float* wte, float* dwte, bool train,
                               float scale) {
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, R = a.rows();
    for (int64_t n = 0; n < BT; ++n)
        WEFT_CHECK(a.targets[n] < cfg_.vocab_size, "target {} of row {} is not < vocab size {}",
                   a.targets[n], n, cfg_.vocab_size);
    ensure_scratch(BT);
    const int64_t chunk = k::classifier_chunk_rows(BT);
    // At least one float: a shard of padding rows only (vr_ = 0) still gets a pointer.
    const int64_t logits_floats = std::max<int64_t>(1, chunk * vr_);
    if (head_logits_.size() < logits_floats) head_logits_ = Buffer(logits_floats);
    if (head_stats_.size() < 3 * chunk) head_stats_ = Buffer(3 * chunk);
    // The partial gradient of every row of lnf: in place under plain tensor parallelism,
    // reduce-scattered to this rank's rows from dC_ under sequence parallelism.
    float* dx = !train ? nullptr : sp_ ? dC_.data() : a.dlnf.data();
    float* logits = head_logits_.data();
    for (int64_t n0 = 0; n0 < BT; n0 += chunk) {
        const int64_t r = std::min(chunk, BT - n0);
        float* max = head_stats_.data();
        float* sums = max + r;  // [2r]: softmax denominators, then target logits
        const float* x = a.lnf.data() + n0 * C;
        const int32_t* t = a.targets.data() + n0;
        k::classifier_shard_logits(logits, max, x, wte, r, C, vr_);
        tp_->all_reduce_max(max, r);
        k::classifier_shard_sums(sums, logits, max, t, r, vr_, v0_, train);
        tp_->all_reduce_sum(sums, 2 * r);
        k::classifier_shard_finish(a.losses.data() + n0, dx ? dx + n0 * C : nullptr, dwte, logits,
                                   max, sums, x, wte, t, r, C, vr_, v0_, scale);
    }
    if (!train) return;
    // f's backward (sequence parallel: g's): every rank fed the same lnf to its vocabulary slice.
    if (sp_)
        tp_->reduce_scatter_sum(dC_.data(), a.dlnf.data(), R * C);
    else
        tp_->all_reduce_sum(a.dlnf.data(), BT * C);
}

void Gpt2::head_backward(Activations& a, UnitAccess& w) {
    check_activations(a);
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, L = cfg_.n_layer, R = a.rows();
    ensure_scratch(BT);
    FinalView f = final_view(w.params(L + 1), layout_, int(L));
    FinalView g = final_view(w.grads(L + 1), layout_, int(L));
    dres_.zero();
    // Sequence parallel: the norm's parameters see only this rank's rows here.
    if (sp_) ln_grads_.zero();
    float* gw = sp_ ? ln_grads_.data() : g.lnf_w;
    float* gb = sp_ ? ln_grads_.data() + C : g.lnf_b;
    k::layernorm_backward(dres_.data(), gw, gb, a.dlnf.data(), a.resid_in(int(L)), f.lnf_w,
                          a.lnf_mean.data(), a.lnf_rstd.data(), R, C);
    if (sp_) {
        float* dst[] = {g.lnf_w, g.lnf_b};
        add_replicated_grads(dst, 2);
    }
    w.release(L + 1);
    w.grads_ready(L + 1);
}

void Gpt2::block_backward(Activations& a, UnitAccess& w, int l) {
    check_activations(a);
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    const int64_t NH = cfg_.n_head / tp_size_, Cl = C / tp_size_, HS = cfg_.head_dim();
    ensure_scratch(BT);
    BlockView p = block_view(w.params(l + 1), layout_, l);
    BlockView g = block_view(w.grads(l + 1), layout_, l);
    if (a.recompute) block_forward_from(a, p, l, w);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    const float* ln1 = a.ln1.data() + s * BT * C;
    const float* qkv = a.qkv.data() + s * BT * 3 * Cl;
    const float* atty = a.atty.data() + s * BT * Cl;
    const float* res2 = a.resid2.data() + s * R * C;
    const float* ln2 = a.ln2.data() + s * BT * C;
    const float* fch = a.fch.data() + s * BT * 4 * Cl;
    const float* fcg = a.fch_gelu.data() + s * BT * 4 * Cl;
    float *dres = dres_.data(), *d3C = d3C_.data(), *d4C = d4C_.data();
    // Sequence parallel: the LayerNorms' parameters see only this rank's rows; their gradients
    // are collected apart and summed over the ranks at the end.
    BlockView gn = g;
    if (sp_) {
        ln_grads_.zero();
        float* lg = ln_grads_.data();
        gn.ln1_w = lg, gn.ln1_b = lg + C, gn.ln2_w = lg + 2 * C, gn.ln2_b = lg + 3 * C;
    }

    // dres holds the gradient of this block's output (this rank's rows); the residual
    // connections mean it flows unchanged to resid2 and to x, and the LayerNorm backwards add
    // their share into it. Row-parallel biases see every row's gradient, so they need no sum.
    const float* dout = gather_grad(dres, R);
    k::matmul_backward(d4C, g.fcproj_w, g.fcproj_b, dout, fcg, p.fcproj_w, BT, 4 * Cl, C, false);
    w.progress();
    k::gelu_backward(d4C, fch, d4C, BT * 4 * Cl);
    k::matmul_backward(dC_.data(), g.fc_w, g.fc_b, d4C, ln2, p.fc_w, BT, C, 4 * Cl, false);
    w.progress();
    k::layernorm_backward(dres, gn.ln2_w, gn.ln2_b, sum_input_grad(BT, R), res2, p.ln2_w,
                          a.ln2_mean.data() + s * R, a.ln2_rstd.data() + s * R, R, C);
    dout = gather_grad(dres, R);
    float* datty = d4C;  // free again: [B*T, C/tp] fits in [B*T, 4C/tp]
    k::matmul_backward(datty, g.proj_w, g.proj_b, dout, atty, p.proj_w, BT, Cl, C, false);
    w.progress();
    k::attention_backward_qkv(d3C, datty, qkv, atty, a.lse.data() + s * B * NH * T, B, T, NH, HS);
    w.progress();
    k::matmul_backward(dC_.data(), g.qkv_w, g.qkv_b, d3C, ln1, p.qkv_w, BT, C, 3 * Cl, false);
    k::layernorm_backward(dres, gn.ln1_w, gn.ln1_b, sum_input_grad(BT, R), x, p.ln1_w,
                          a.ln1_mean.data() + s * R, a.ln1_rstd.data() + s * R, R, C);
    if (sp_) {
        float* dst[] = {g.ln1_w, g.ln1_b, g.ln2_w, g.ln2_b};
        add_replicated_grads(dst, 4);
    }
    w.release(l + 1);
    w.grads_ready(l + 1);
}

void Gpt2::embed_backward(Activations& a, UnitAccess& w) {
    check_activations(a);
    EmbedView g = embed_view(w.grads(0), layout_);
    const int64_t C = cfg_.n_embd;
    if (tp_size_ == 1) {
        k::embedding_backward(g.wte, g.wpe, dres_.data(), a.inputs.data(), a.B, a.T, C);
    } else {
        // Every row's gradient: a rank's slice of the vocabulary may appear in any of them, and
        // with it each rank has the whole gradient of the replicated wpe.
        const float* dout = gather_grad(dres_.data(), a.rows());
        k::embedding_backward_shard(g.wte, dout, a.inputs.data(), a.B, a.T, C, v0_, vs_);
        k::embedding_backward(nullptr, g.wpe, dout, a.inputs.data(), a.B, a.T, C);
    }
    w.release(0);
    w.grads_ready(0);
}

double Gpt2::forward(Activations& a, UnitAccess& w, bool train, float loss_scale) {
    embed_forward(a, w);
    for (int l = 0; l < cfg_.n_layer; ++l) block_forward(a, w, l);
    return head_forward(a, w, train, loss_scale);
}

void Gpt2::backward(Activations& a, UnitAccess& w) {
    head_backward(a, w);
    for (int l = int(cfg_.n_layer) - 1; l >= 0; --l) block_backward(a, w, l);
    embed_backward(a, w);
}

}  // namespace weft::model
