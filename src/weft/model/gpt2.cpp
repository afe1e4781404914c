#include "weft/model/gpt2.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/gelu.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/model/row_products.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

// The sizes of one Gpt2Activations' own buffers, in floats: the constructor allocates them and
// floats() adds them up, so the memory estimate cannot drift from what is allocated.
struct Gpt2Sizes {
    int64_t kept;                                    // layers with buffers (1 when recomputing)
    int64_t ln, stats, qkv, atty, lse, resid2, fch;  // per kept layer, each tensor
    int64_t lnf, lnf_stats, dlnf;                    // head
    bool bf16;                                       // ln1, ln2, fch and fch_gelu stored as bf16
    bool attn16;  // qkv and atty stored as bf16 (the bf16 attention kernel's)
};

Gpt2Sizes gpt2_sizes(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span) {
    const int64_t BT = B * T, C = cfg.n_embd, NH = cfg.n_head, tp = span.tp;
    WEFT_CHECK(tp >= 1 && NH % tp == 0,
               "{} attention heads do not split over tensor-parallel degree {}: the head count "
               "must be a multiple of --tp",
               NH, tp);
    const int64_t n = span.layers(cfg.n_layer);
    const int64_t rows = span.sequence_parallel && tp > 1 ? BT / tp : BT;
    Gpt2Sizes s;
    s.kept = span.recompute ? std::min<int64_t>(1, n) : n;
    s.ln = BT * C;
    s.stats = rows;
    s.qkv = BT * 3 * C / tp;
    s.atty = BT * C / tp;
    s.lse = B * (NH / tp) * T;
    s.resid2 = rows * C;
    s.fch = BT * 4 * C / tp;
    s.lnf = span.head ? BT * C : 0;
    s.lnf_stats = span.head ? rows : 0;
    s.dlnf = span.head ? rows * C : 0;
    s.bf16 = span.bf16;
    s.attn16 = span.bf16;
    return s;
}

}  // namespace

Gpt2Activations::Gpt2Activations(const ModelConfig& cfg, int64_t B_, int64_t T_, LayerSpan span)
    : Activations(cfg, B_, T_, span) {
    const Gpt2Sizes s = gpt2_sizes(cfg, B, T, span);
    const int64_t L = s.kept;
    bf16 = s.bf16;
    ln1 = KeptTensor(L * s.ln, bf16);
    ln1_mean = Buffer(L * s.stats);
    ln1_rstd = Buffer(L * s.stats);
    qkv = KeptTensor(L * s.qkv, s.attn16);
    atty = KeptTensor(L * s.atty, s.attn16);
    lse = Buffer(L * s.lse);
    resid2 = Buffer(L * s.resid2);
    ln2 = KeptTensor(L * s.ln, bf16);
    ln2_mean = Buffer(L * s.stats);
    ln2_rstd = Buffer(L * s.stats);
    fch = KeptTensor(L * s.fch, bf16);
    fch_gelu = KeptTensor(L * s.fch, bf16);
    if (head) {
        lnf = Buffer(s.lnf);
        lnf_mean = Buffer(s.lnf_stats);
        lnf_rstd = Buffer(s.lnf_stats);
        dlnf = Buffer(s.dlnf);
    }
}

int64_t Gpt2Activations::floats(const ModelConfig& cfg, int64_t B, int64_t T,
                                const LayerSpan& span) {
    const int64_t shared = Activations::shared_floats(cfg, B, T, span);
    const Gpt2Sizes s = gpt2_sizes(cfg, B, T, span);
    // Per kept layer: resid2, four LayerNorm statistics and the attention log-sum-exp in fp32
    // (at tp = 1: C per token, 4 per token, NH per token); ln1, ln2, fch, fch_gelu (10 C per
    // token) and qkv, atty (4 C per token) in fp32 or bf16, as the constructor allocates them;
    // the head's final norm, its gradient and statistics.
    const int64_t fp32_per_layer = s.resid2 + 4 * s.stats + s.lse;
    const int64_t L = s.kept;
    const int64_t kept =
        2 * KeptTensor::floats(L * s.ln, s.bf16) + 2 * KeptTensor::floats(L * s.fch, s.bf16) +
        KeptTensor::floats(L * s.qkv, s.attn16) + KeptTensor::floats(L * s.atty, s.attn16);
    return shared + L * fp32_per_layer + kept + s.lnf + 2 * s.lnf_stats + s.dlnf;
}

Gpt2::Gpt2(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp, bool sequence_parallel)
    : Model(cfg, shard, tp ? tp->size() : 1, shard.tp_rank, sequence_parallel),
      tp_(tp, shard.tp_rank, sequence_parallel, cfg.n_embd, cfg.vocab_size, cfg.padded_vocab()),
      norm_(NormBlock::Kind::layer_norm, cfg.n_embd, cfg.ln_eps, tp_) {}

std::unique_ptr<Activations> Gpt2::new_activations(int64_t B, int64_t T, LayerSpan span) const {
    return std::make_unique<Gpt2Activations>(cfg_, B, T, activation_span(span));
}

Gpt2Activations& Gpt2::acts(Activations& a) const {
    check_activations(a);
    auto* g = dynamic_cast<Gpt2Activations*>(&a);
    WEFT_CHECK(g, "internal: a GPT-2 model given another family's activations");
    return *g;
}

int64_t Gpt2::scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp,
                             bool sequence_parallel) {
    const bool sp = sequence_parallel && tp > 1;
    const int64_t BT = B * T, C = cfg.n_embd, rows = sp ? BT / tp : BT;
    // The weight gradient's transposed product that matmul_backward keeps for the widest of
    // the four layers (kernels::matmul_backward_scratch_floats).
    const int64_t dweight = std::max({kernels::matmul_backward_scratch_floats(C, 3 * C / tp),
                                      kernels::matmul_backward_scratch_floats(C / tp, C),
                                      kernels::matmul_backward_scratch_floats(C, 4 * C / tp),
                                      kernels::matmul_backward_scratch_floats(4 * C / tp, C)});
    // dres_, dC_, d3C_, d4C_, and the norms' partial gradients.
    return rows * C + BT * C + BT * 3 * C / tp + BT * 4 * C / tp +
           NormBlock::scratch_floats(NormBlock::Kind::layer_norm, C, sp) + dweight;
}

void Gpt2::ensure_scratch(int64_t BT) {
    if (scratch_bt_ >= BT) return;
    const int64_t C = cfg_.n_embd, tp = tp_size_;
    dres_ = Buffer((sp_ ? BT / tp : BT) * C);
    dC_ = Buffer(BT * C);
    d3C_ = Buffer(BT * 3 * C / tp);
    d4C_ = Buffer(BT * 4 * C / tp);
    scratch_bt_ = BT;
}

float* Gpt2::dresid(int64_t B, int64_t T) {
    ensure_scratch(B * T);
    return dres_.data();
}

Gpt2Block Gpt2::block(float* base, int layer) const {
    float* p[12];
    for (int i = 0; i < 12; ++i) p[i] = unit_tensor(base, layout_, layer + 1, i);
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

Gpt2Embed Gpt2::embed(float* base) const {
    return {unit_tensor(base, layout_, 0, 0), unit_tensor(base, layout_, 0, 1)};
}

Gpt2Final Gpt2::final_norm(float* base) const {
    const int u = int(cfg_.n_layer) + 1;
    return {unit_tensor(base, layout_, u, 0), unit_tensor(base, layout_, u, 1)};
}

void Gpt2::embed_forward(Activations& a, UnitAccess& w, int64_t pos0) {
    check_embedding(a, pos0);
    Gpt2Embed e = embed(w.params(0));
    if (tp_size_ > 1) ensure_scratch(a.B * a.T);  // the partial sums (one process needs none)
    // Context parallel: the rows are not positions 0 .. T-1, so wpe is added here by position,
    // to this rank's rows (under sequence parallelism a block of the flattened B*T, which any
    // row of any sequence may start).
    const bool listed = !a.positions.empty();
    WEFT_CHECK(!listed || pos0 == 0, "internal: listed positions with an offset {}", pos0);
    tp_.embedding_forward(a.resid_in(0), a.inputs.data(), e.wte, listed ? nullptr : e.wpe, a.B, a.T,
                          pos0, dC_.data());
    if (!listed) return;
    const int64_t C = cfg_.n_embd, R = a.rows(), r0 = sp_ ? tp_rank_ * R : 0;
    for (int64_t r = 0; r < R; ++r) {
        float* x = a.resid_in(0) + r * C;
        const float* p = e.wpe + a.position(r0 + r) * C;
        for (int64_t j = 0; j < C; ++j) x[j] += p[j];
    }
}

void Gpt2::block_forward(Activations& a, UnitAccess& w, int l) {
    block_forward_from(acts(a), block(w.params(l + 1), l), l, w);
    w.release(l + 1);
}

int64_t Gpt2::row_floats(const ModelConfig& cfg, int64_t rows) {
    // x, ln, qkv, att, h, g and y, and the norm's statistics.
    return rows * cfg.n_embd * (1 + 1 + 3 + 1 + 4 + 4 + 1) + 2 * rows;
}

void Gpt2::forward_rows(const RowBatch& b, UnitAccess& w, KvPool& kv, RowProducts& mm,
                        float* logits) {
    check_rows(b);
    // This rank's heads and MLP columns (all of them at tp 1).
    const int64_t R = b.rows(), C = cfg_.n_embd, Cl = C / tp_size_, NH = cfg_.n_head / tp_size_;
    const int64_t L = cfg_.n_layer;
    // Counted by row_floats: change both together.
    Buffer x(R * C), ln(R * C), qkv(R * 3 * Cl), att(R * Cl), h(R * 4 * Cl), g(R * 4 * Cl);
    Buffer y(R * C), stats(2 * R);
    const Gpt2Embed e = embed(w.params(0));
    // wte's row plus wpe's, as one process's embedding adds them; an extra row is the batch's
    // embedding instead of wte's (every rank holds the extra rows whole).
    tp_.embed_rows(x.data(), b.tokens.data(), e.wte, R);
    for (int64_t r = 0; r < R; ++r) {
        if (b.tokens[size_t(r)] >= cfg_.vocab_size)
            std::copy_n(b.embedding(r, e.wte, cfg_.vocab_size, C), C, x.data() + r * C);
        const float* p = e.wpe + b.positions[size_t(r)] * C;
        for (int64_t j = 0; j < C; ++j) x.data()[r * C + j] += p[j];
    }
    auto add = [&](float* to, const float* from) {
        for (int64_t i = 0; i < R * C; ++i) to[i] += from[i];
    };
    for (int l = 0; l < L; ++l) {
        const Gpt2Block p = block(w.params(l + 1), l);
        norm_.forward(ln.data(), {stats.data(), stats.data() + R}, x.data(), {p.ln1_w, p.ln1_b}, R);
        mm(qkv.data(), ln.data(), p.qkv_w, p.qkv_b, R, C, 3 * Cl);
        attend_rows(att.data(), qkv.data(), 3 * Cl, b, kv, l, NH, NH, cfg_.head_dim());
        tp_.row_parallel_rows(y.data(), att.data(), p.proj_w, p.proj_b, R, Cl, mm);
        add(x.data(), y.data());
        norm_.forward(ln.data(), {stats.data(), stats.data() + R}, x.data(), {p.ln2_w, p.ln2_b}, R);
        mm(h.data(), ln.data(), p.fc_w, p.fc_b, R, C, 4 * Cl);
        // Row by row, so that no vector loop's tail falls inside a row at some R and not others.
        for (int64_t r = 0; r < R; ++r)
            k::gelu_forward(g.data() + r * 4 * Cl, h.data() + r * 4 * Cl, 4 * Cl);
        tp_.row_parallel_rows(y.data(), g.data(), p.fcproj_w, p.fcproj_b, R, 4 * Cl, mm);
        add(x.data(), y.data());
        w.release(l + 1);
    }
    const int64_t n = int64_t(b.logit_rows.size());
    for (int64_t i = 0; i < n; ++i)
        std::copy_n(x.data() + b.logit_rows[size_t(i)] * C, C, y.data() + i * C);
    const Gpt2Final f = final_norm(w.params(int(L) + 1));
    norm_.forward(ln.data(), {stats.data(), stats.data() + R}, y.data(), {f.lnf_w, f.lnf_b}, n);
    tp_.head_rows(logits, ln.data(), e.wte, b, mm);
    w.release(int(L) + 1);
    w.release(0);
}

NormBlock::Stats Gpt2::ln1_stats(Gpt2Activations& a, int64_t slot) const {
    const int64_t R = a.rows();
    return {a.ln1_mean.data() + slot * R, a.ln1_rstd.data() + slot * R};
}

NormBlock::Stats Gpt2::ln2_stats(Gpt2Activations& a, int64_t slot) const {
    const int64_t R = a.rows();
    return {a.ln2_mean.data() + slot * R, a.ln2_rstd.data() + slot * R};
}

AttentionCore Gpt2::attention(Gpt2Activations& a, int64_t slot) const {
    const int64_t BT = a.B * a.T, NH = cfg_.n_head / tp_size_, Cl = cfg_.n_embd / tp_size_;
    return {a.B,
            a.T,
            NH,
            NH,
            cfg_.head_dim(),
            a.qkv,
            slot * BT * 3 * Cl,
            a.atty,
            slot * BT * Cl,
            a.lse.data() + slot * a.B * NH * a.T,
            a.cu_seqlens,
            a.cp_doc_blocks,
            &a.cp_doc_order};
}

void Gpt2::block_forward_from(Gpt2Activations& a, const Gpt2Block& p, int l, UnitAccess& w) {
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    // This rank's heads and MLP columns.
    const int64_t Cl = C / tp_size_;
    ensure_scratch(BT);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    // bf16: the LayerNorm, qkv, attention, fc and GELU outputs are made in fp32 in scratch that
    // is free in forward (dC_, d3C_, d4C_) and rounded into the kept buffers.
    const bool attn16 = a.qkv.bf16();
    const int64_t at_ln = s * BT * C, at_qkv = s * BT * 3 * Cl, at_att = s * BT * Cl;
    const int64_t at_fc = s * BT * 4 * Cl;
    float* ln1 = a.bf16 ? dC_.data() : a.ln1.f32() + at_ln;
    float* qkv = attn16 ? d3C_.data() : a.qkv.f32() + at_qkv;
    float* atty = attn16 ? d4C_.data() : a.atty.f32() + at_att;
    float* res2 = a.resid2.data() + s * R * C;
    float* ln2 = a.bf16 ? dC_.data() : a.ln2.f32() + at_ln;
    float* out = a.resid_in(l + 1);

    // Attention: the LayerNorm of this rank's rows, then (sequence parallel) every rank's rows,
    // the input of the column-parallel qkv projection.
    norm_.forward(ln1, ln1_stats(a, s), x, {p.ln1_w, p.ln1_b}, R);
    if (attn16) {
        // q, k, v are only wanted as bf16 (every path below reads the kept copy): the product
        // writes them rounded.
        keep_and_project_kept(a.qkv, at_qkv, ln1, a.ln1, at_ln, p.qkv_w, p.qkv_b, BT, C, 3 * Cl,
                              qkv);
    } else {
        keep_and_project(qkv, ln1, a.ln1, at_ln, p.qkv_w, p.qkv_b, BT, C, 3 * Cl);
    }
    w.progress();
    attention(a, s).forward(cp_.get(), qkv, atty);
    w.progress();
    if (attn16)
        tp_.row_parallel_forward(res2, a.atty.b16() + at_att, p.proj_w, p.proj_b, x, BT, Cl, R,
                                 dC_.data());
    else
        tp_.row_parallel_forward(res2, atty, p.proj_w, p.proj_b, x, BT, Cl, R, dC_.data());
    w.progress();
    // MLP, the same way.
    norm_.forward(ln2, ln2_stats(a, s), res2, {p.ln2_w, p.ln2_b}, R);
    if (a.bf16) {
        // fch is kept as bf16 and the GELU reads it so, as its backward will: the product writes
        // it rounded, and the GELU rounds its output into the kept fch_gelu, with no fp32 copy
        // of either [B*T, 4C] (62 ms of a 4.3 s GPT-2 step went to rounding such copies).
        keep_and_project_kept(a.fch, at_fc, ln2, a.ln2, at_ln, p.fc_w, p.fc_b, BT, C, 4 * Cl,
                              d4C_.data());
        w.progress();
        k::gelu_forward_bf16(a.fch_gelu.b16() + at_fc, a.fch.b16() + at_fc, BT * 4 * Cl);
        tp_.row_parallel_forward(out, a.fch_gelu.b16() + at_fc, p.fcproj_w, p.fcproj_b, res2, BT,
                                 4 * Cl, R, dC_.data());
    } else {
        float* fch = a.fch.f32() + at_fc;
        float* fcg = a.fch_gelu.f32() + at_fc;
        keep_and_project(fch, ln2, a.ln2, at_ln, p.fc_w, p.fc_b, BT, C, 4 * Cl);
        w.progress();
        k::gelu_forward(fcg, fch, BT * 4 * Cl);
        tp_.row_parallel_forward(out, fcg, p.fcproj_w, p.fcproj_b, res2, BT, 4 * Cl, R, dC_.data());
    }
}

double Gpt2::head_forward(Activations& base, UnitAccess& w, bool train, float loss_scale) {
    Gpt2Activations& a = acts(base);
    WEFT_CHECK(a.head && a.first_layer + a.n_layers == cfg_.n_layer,
               "internal: the head needs the output of the last layer");
    const int64_t BT = a.B * a.T, L = cfg_.n_layer, R = a.rows();
    if (tp_size_ > 1) ensure_scratch(BT);  // the partial sums (one process needs none)
    Gpt2Final f = final_norm(w.params(int(L) + 1));
    const float* x = a.resid_in(int(L));
    norm_.forward(a.lnf.data(), {a.lnf_mean.data(), a.lnf_rstd.data()}, x, {f.lnf_w, f.lnf_b}, R);
    // The head is tied to the token embedding; its gradient goes into wte's.
    Gpt2Embed e = embed(w.params(0));
    float* dwte = train ? embed(w.grads(0)).wte : nullptr;
    tp_.head(a.losses.data(), a.dlnf.data(), dwte, a.lnf.data(), e.wte, a.targets.data(), BT, R,
             train, loss_scale, dC_.data(), &a.soft_targets);
    w.release(int(L) + 1);
    w.release(0);
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
    return sum;
}

void Gpt2::head_backward(Activations& base, UnitAccess& w) {
    Gpt2Activations& a = acts(base);
    const int64_t BT = a.B * a.T, L = cfg_.n_layer, R = a.rows();
    ensure_scratch(BT);
    Gpt2Final f = final_norm(w.params(int(L) + 1));
    Gpt2Final g = final_norm(w.grads(int(L) + 1));
    dres_.zero();
    norm_.begin_backward();
    norm_.backward(0, dres_.data(), {g.lnf_w, g.lnf_b}, a.dlnf.data(), a.resid_in(int(L)),
                   {f.lnf_w, f.lnf_b}, {a.lnf_mean.data(), a.lnf_rstd.data()}, R);
    norm_.end_backward();
    w.release(int(L) + 1);
    w.grads_ready(int(L) + 1);
}

void Gpt2::block_backward(Activations& base, UnitAccess& w, int l) {
    Gpt2Activations& a = acts(base);
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    const int64_t Cl = C / tp_size_;
    ensure_scratch(BT);
    Gpt2Block p = block(w.params(l + 1), l);
    Gpt2Block g = block(w.grads(l + 1), l);
    if (a.recompute) block_forward_from(a, p, l, w);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    const bool attn16 = a.qkv.bf16();
    const int64_t at_ln = s * BT * C, at_att = s * BT * Cl;
    const int64_t at_fc = s * BT * 4 * Cl;
    const float* res2 = a.resid2.data() + s * R * C;
    float *dres = dres_.data(), *d3C = d3C_.data(), *d4C = d4C_.data();
    norm_.begin_backward();

    // dres holds the gradient of this block's output (this rank's rows); the residual
    // connections mean it flows unchanged to resid2 and to x, and the LayerNorm backwards add
    // their share into it. Row-parallel biases see every row's gradient, so they need no sum.
    // Under sequence parallelism d4C_ is free whenever an input gradient is reduce-scattered
    // (its last reader, the column-parallel weight gradient, has run) and holds B*T*4C/tp >=
    // rows*C floats.
    const float* dout = tp_.gather_grad(dres, R, dC_.data());
    backward_kept(d4C, g.fcproj_w, g.fcproj_b, dout, a.fch_gelu, at_fc, p.fcproj_w, BT, 4 * Cl, C);
    w.progress();
    if (a.bf16) {
        // fc's products read the GELU's gradient only rounded: it is written so, with fc's bias
        // gradient summed on the way, into d3C_ (free until attention's backward; [B*T, 3C/tp]
        // floats hold [B*T, 4C/tp] bf16).
        uint16_t* dfc16 = reinterpret_cast<uint16_t*>(d3C);
        k::gelu_backward_bf16(dfc16, g.fc_b, a.fch.b16() + at_fc, d4C, BT, 4 * Cl);
        backward_kept_bf16_dout(dC_.data(), g.fc_w, dfc16, a.ln2, at_ln, p.fc_w, BT, C, 4 * Cl);
    } else {
        // fc's bias gradient is summed as the GELU's backward writes it, not read back after.
        k::gelu_backward_bias(d4C, g.fc_b, a.fch.f32() + at_fc, d4C, BT, 4 * Cl);
        backward_kept(dC_.data(), g.fc_w, nullptr, d4C, a.ln2, at_ln, p.fc_w, BT, C, 4 * Cl);
    }
    w.progress();
    norm_.backward(1, dres, {g.ln2_w, g.ln2_b}, tp_.sum_input_grad(dC_.data(), BT, R, d4C), res2,
                   {p.ln2_w, p.ln2_b}, ln2_stats(a, s), R);
    dout = tp_.gather_grad(dres, R, dC_.data());
    float* datty = d4C;  // free again: [B*T, C/tp] fits in [B*T, 4C/tp]
    // The bf16 kernel takes the output's gradient rounded to bf16, as the products round it: the
    // projection's backward writes it so, at d4C_ (the fp32 scratch of emulated products past
    // it; dC_ may hold dout under sequence parallelism).
    uint16_t* datty16 = reinterpret_cast<uint16_t*>(d4C);
    if (attn16)
        backward_kept_rounded(datty16, d4C + BT * Cl, g.proj_w, g.proj_b, dout, a.atty, at_att,
                              p.proj_w, BT, Cl, C);
    else
        backward_kept(datty, g.proj_w, g.proj_b, dout, a.atty, at_att, p.proj_w, BT, Cl, C);
    w.progress();
    attention(a, s).backward(cp_.get(), d3C, datty, datty16);
    w.progress();
    backward_kept(dC_.data(), g.qkv_w, g.qkv_b, d3C, a.ln1, at_ln, p.qkv_w, BT, C, 3 * Cl);
    norm_.backward(0, dres, {g.ln1_w, g.ln1_b}, tp_.sum_input_grad(dC_.data(), BT, R, d4C), x,
                   {p.ln1_w, p.ln1_b}, ln1_stats(a, s), R);
    norm_.end_backward();
    w.release(l + 1);
    w.grads_ready(l + 1);
}

void Gpt2::embed_backward(Activations& a, UnitAccess& w) {
    check_activations(a);
    ensure_scratch(a.B * a.T);
    Gpt2Embed g = embed(w.grads(0));
    const bool listed = !a.positions.empty();
    tp_.embedding_backward(g.wte, listed ? nullptr : g.wpe, dres_.data(), a.inputs.data(), a.B, a.T,
                           dC_.data());
    if (listed) {
        // Every row's gradient, as wpe's own backward takes it: under sequence parallelism the
        // one embedding_backward gathered into dC_ (each tp rank keeps the whole replicated
        // wpe's gradient).
        const float* dall = sp_ ? dC_.data() : dres_.data();
        const int64_t C = cfg_.n_embd;
        for (int64_t r = 0; r < a.B * a.T; ++r) {
            const float* d = dall + r * C;
            float* p = g.wpe + a.position(r) * C;
            for (int64_t j = 0; j < C; ++j) p[j] += d[j];
        }
    }
    w.release(0);
    w.grads_ready(0);
}

}  // namespace weft::model
