#include "weft/model/llama.hpp"

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/swiglu.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/model/row_products.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

// This rank's widths at tensor-parallel degree tp.
struct Widths {
    int64_t NH, NKV, HS, F, qkv;
};

Widths widths(const ModelConfig& cfg, int tp) {
    const int64_t NH = cfg.n_head / tp, NKV = cfg.kv_heads() / tp, HS = cfg.head_dim();
    return {NH, NKV, HS, cfg.ffn() / tp, (NH + 2 * NKV) * HS};
}

// Columns of wide_ a row: forward's [gate | up] (2F); backward's attention-output gradient (A)
// and the fp32 scratch of emulated bf16 products after it.
int64_t wide_width(const Widths& w) {
    return std::max(2 * w.F, w.NH * w.HS + w.qkv);
}

// The sizes of one LlamaActivations' own buffers, in floats (see Gpt2's Sizes).
struct Sizes {
    int64_t kept, ln, stats, qkv, atty, lse, resid2, gu, act, lnf, lnf_stats, dlnf;
    bool bf16;    // ln1, gu, act stored as bf16 (and ln2 without experts)
    bool ln2_16;  // ln2 stored as bf16: the MoE block reads it in fp32
    bool attn16;  // qkv and atty stored as bf16 (the bf16 attention kernel's)
};

Sizes sizes(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span) {
    const int64_t BT = B * T, C = cfg.n_embd, tp = span.tp;
    WEFT_CHECK(cfg.n_head % tp == 0 && cfg.kv_heads() % tp == 0,
               "{} attention heads and {} key/value heads do not both split over "
               "tensor-parallel degree {}",
               cfg.n_head, cfg.kv_heads(), tp);
    const Widths w = widths(cfg, int(tp));
    const int64_t n = span.layers(cfg.n_layer);
    const int64_t rows = span.sequence_parallel && tp > 1 ? BT / tp : BT;
    Sizes s;
    s.kept = span.recompute ? std::min<int64_t>(1, n) : n;
    s.ln = BT * C;
    s.stats = rows;
    s.qkv = BT * w.qkv;
    s.atty = BT * w.NH * w.HS;
    s.lse = B * w.NH * T;
    s.resid2 = rows * C;
    // An MoE layer keeps its own buffers (MoeLayerActs) in place of the dense MLP's.
    const bool moe = cfg.n_experts > 0;
    s.gu = moe ? 0 : BT * 2 * w.F;
    s.act = moe ? 0 : BT * w.F;
    s.lnf = span.head ? BT * C : 0;
    s.lnf_stats = span.head ? rows : 0;
    s.dlnf = span.head ? rows * C : 0;
    s.bf16 = span.bf16;
    s.ln2_16 = span.bf16 && !moe;
    s.attn16 = span.bf16;
    return s;
}

// Rotary embedding of B sequences of T rows at `positions` (empty: pos0 .. pos0 + T - 1; T of
// them, one a sequence row; or B*T, one a batch row), one kernel call per run of consecutive
// positions (context parallel: a rank's two zigzag chunks; packed: each document).
void rope_rows(float* x, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld, int64_t pos0,
               const std::vector<int64_t>& positions, const kernels::RopeTable& table,
               bool backward) {
    auto run = [&](float* p, int64_t b, int64_t n, int64_t at) {
        if (backward)
            k::rope_backward(p, b, n, nheads, HS, ld, at, table);
        else
            k::rope_forward(p, b, n, nheads, HS, ld, at, table);
    };
    if (positions.empty()) return run(x, B, T, pos0);
    auto at = [&](int64_t b, int64_t t) { return positions[size_t(b * T + t) % positions.size()]; };
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t t0 = 0; t0 < T;) {
            int64_t t1 = t0 + 1;
            while (t1 < T && at(b, t1) == at(b, t1 - 1) + 1) ++t1;
            run(x + (b * T + t0) * ld, 1, t1 - t0, at(b, t0));
            t0 = t1;
        }
    }
}

}  // namespace

kernels::RopeScaling rope_scaling(const RopeScalingConfig& r) {
    kernels::RopeScaling s;
    if (r.type == "linear") s.kind = kernels::RopeScaling::Kind::linear;
    if (r.type == "llama3") s.kind = kernels::RopeScaling::Kind::llama3;
    s.factor = r.factor;
    s.low_freq_factor = r.low_freq_factor;
    s.high_freq_factor = r.high_freq_factor;
    s.original_max_position = r.original_max_position;
    return s;
}

LlamaActivations::LlamaActivations(const ModelConfig& cfg, int64_t B_, int64_t T_, LayerSpan span)
    : Activations(cfg, B_, T_, span) {
    const Sizes s = sizes(cfg, B, T, span);
    const int64_t L = s.kept;
    ln1 = KeptTensor(L * s.ln, s.bf16);
    rstd1 = Buffer(L * s.stats);
    qkv = KeptTensor(L * s.qkv, s.attn16);
    atty = KeptTensor(L * s.atty, s.attn16);
    lse = Buffer(L * s.lse);
    resid2 = Buffer(L * s.resid2);
    ln2 = KeptTensor(L * s.ln, s.ln2_16);
    rstd2 = Buffer(L * s.stats);
    gu = KeptTensor(L * s.gu, s.bf16);
    act = KeptTensor(L * s.act, s.bf16);
    if (head) {
        lnf = Buffer(s.lnf);
        lnf_rstd = Buffer(s.lnf_stats);
        dlnf = Buffer(s.dlnf);
    }
    if (cfg.n_experts > 0) {
        for (int64_t i = 0; i < L; ++i) moe.emplace_back(cfg, B * T);
        moe_counts.assign(size_t(n_layers), std::vector<double>(size_t(cfg.n_experts), 0.0));
    }
}

int64_t LlamaActivations::floats(const ModelConfig& cfg, int64_t B, int64_t T,
                                 const LayerSpan& span) {
    const Sizes s = sizes(cfg, B, T, span);
    // Per kept layer: the RMSNorm statistics, lse and resid2 in fp32, the rest in fp32 or bf16
    // as the constructor allocates them.
    const int64_t L = s.kept, fp32_per_layer = 2 * s.stats + s.lse + s.resid2;
    const int64_t kept =
        KeptTensor::floats(L * s.ln, s.bf16) + KeptTensor::floats(L * s.ln, s.ln2_16) +
        KeptTensor::floats(L * s.qkv, s.attn16) + KeptTensor::floats(L * s.atty, s.attn16) +
        KeptTensor::floats(L * s.gu, s.bf16) + KeptTensor::floats(L * s.act, s.bf16);
    const int64_t moe = cfg.n_experts > 0 ? s.kept * MoeLayerActs::floats(cfg, B * T) +
                                                span.layers(cfg.n_layer) * 2 * cfg.n_experts
                                          : 0;
    return Activations::shared_floats(cfg, B, T, span) + L * fp32_per_layer + kept + s.lnf +
           s.lnf_stats + s.dlnf + moe;
}

Llama::Llama(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp, bool sequence_parallel)
    : Model(cfg, shard, tp ? tp->size() : 1, shard.tp_rank, sequence_parallel),
      tp_(tp, shard.tp_rank, sequence_parallel, cfg.n_embd, cfg.vocab_size, cfg.padded_vocab()),
      norm_(NormBlock::Kind::rms_norm, cfg.n_embd, cfg.ln_eps, tp_) {
    const Widths w = widths(cfg_, tp_size_);
    NH_ = w.NH, NKV_ = w.NKV, HS_ = w.HS, F_ = w.F, qkv_ = w.qkv;
    if (cfg_.n_experts > 0) {
        // Under tp the MoE block is replicated: every tp rank holds the same rows (so the same
        // routing) and its experts whole, and computes the block itself. With sequence
        // parallelism a rank's residual rows are its slice only; not built.
        WEFT_CHECK(tp_size_ == 1 || !sequence_parallel,
                   "--tp {} with --sequence-parallel: weft's mixture-of-experts layers ({} "
                   "experts) run replicated on every tp rank, on the rows all of them hold; "
                   "drop --sequence-parallel",
                   tp_size_, cfg_.n_experts);
        moe_ = std::make_unique<MoeMlp>(cfg_);
        moe_stats_.n_experts = cfg_.n_experts;
        moe_stats_.tokens.assign(size_t(cfg_.n_layer * cfg_.n_experts), 0.0);
        router_bias_.assign(size_t(cfg_.n_layer * cfg_.n_experts), 0.0f);
    }
}

void Llama::set_expert_comm(ExpertComm* comm) {
    if (moe_) moe_->set_expert_comm(comm);
}

bool Llama::balances() const {
    return moe_ && cfg_.moe_router_bias_rate > 0;
}

std::optional<double> Llama::balance_routers(const MoeStats& s) {
    if (!balances()) return std::nullopt;
    const int64_t E = cfg_.n_experts;
    for (int64_t l = 0; l < cfg_.n_layer; ++l)
        moe_update_router_bias(router_bias_.data() + l * E, s.tokens.data() + l * E, E,
                               cfg_.moe_router_bias_rate);
    double spread = 0;
    for (float b : router_bias_) spread = std::max(spread, double(std::abs(b)));
    return spread;
}

std::vector<float> Llama::router_bias() const {
    return balances() ? router_bias_ : std::vector<float>{};
}

void Llama::set_router_bias(const std::vector<float>& saved, const std::string& from) {
    // A run that turns balancing on at resume starts from 0; one that turns it off drops it.
    if (!balances()) return;
    WEFT_CHECK(saved.size() == router_bias_.size(),
               "{}: moe_router_bias has {} values, expected {} ({} layers x {} experts)", from,
               saved.size(), router_bias_.size(), cfg_.n_layer, cfg_.n_experts);
    router_bias_ = saved;
}

MoeStats Llama::take_moe_stats() {
    MoeStats out = moe_stats_;
    std::fill(moe_stats_.tokens.begin(), moe_stats_.tokens.end(), 0.0);
    moe_stats_.aux_loss = moe_stats_.z_loss = moe_stats_.dropped = moe_stats_.slots = 0;
    return out;
}

std::unique_ptr<Activations> Llama::new_activations(int64_t B, int64_t T, LayerSpan span) const {
    return std::make_unique<LlamaActivations>(cfg_, B, T, activation_span(span));
}

LlamaActivations& Llama::acts(Activations& a) const {
    check_activations(a);
    auto* l = dynamic_cast<LlamaActivations*>(&a);
    WEFT_CHECK(l, "internal: a Llama model given another family's activations");
    return *l;
}

int64_t Llama::scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T, int tp,
                              bool sequence_parallel) {
    const bool sp = sequence_parallel && tp > 1;
    const Widths w = widths(cfg, tp);
    const int64_t BT = B * T, C = cfg.n_embd, rows = sp ? BT / tp : BT;
    // The weight gradient's transposed product that matmul_backward keeps for the widest layer
    // it runs (kernels::matmul_backward_scratch_floats); an MoE block runs its experts' products
    // itself and the router's (always in fp32) and shared experts' through matmul_backward.
    auto dw = [](int64_t in, int64_t out) {
        return kernels::matmul_backward_scratch_floats(in, out);
    };
    int64_t dweight = std::max(dw(C, w.qkv), dw(w.NH * w.HS, C));
    if (cfg.n_experts > 0) {
        const int64_t SF = cfg.n_shared_experts * cfg.ffn();
        const int64_t router = kernels::matmul_backward_scratch_floats(
            C, cfg.n_experts, kernels::MatmulPrecision::fp32);
        dweight = std::max({dweight, router, dw(C, 2 * SF), dw(SF, C)});
    } else {
        dweight = std::max({dweight, dw(C, 2 * w.F), dw(w.F, C)});
    }
    return rows * C + BT * C + BT * w.qkv + BT * w.F + BT * wide_width(w) + (sp ? rows * C : 0) +
           NormBlock::scratch_floats(NormBlock::Kind::rms_norm, C, sp) +
           (cfg.n_experts > 0 ? MoeMlp::scratch_floats(cfg, BT) : 0) + dweight;
}

void Llama::ensure_scratch(int64_t BT) {
    if (scratch_bt_ >= BT) return;
    const int64_t C = cfg_.n_embd, rows = sp_ ? BT / tp_size_ : BT;
    dres_ = Buffer(rows * C);
    dC_ = Buffer(BT * C);
    dqkv_ = Buffer(BT * qkv_);
    dact_ = Buffer(BT * F_);
    wide_ = Buffer(BT * wide_width(widths(cfg_, tp_size_)));
    if (sp_) rows_ = Buffer(rows * C);
    scratch_bt_ = BT;
}

const kernels::RopeTable& Llama::rope(int64_t positions) {
    // Built for every position the model allows on first use: the same angles whatever the
    // sequence length of the run.
    if (rope_.positions < positions)
        rope_ = kernels::rope_table(HS_, cfg_.n_positions, cfg_.rope_theta,
                                    rope_scaling(cfg_.rope_scaling));
    return rope_;
}

float* Llama::dresid(int64_t B, int64_t T) {
    ensure_scratch(B * T);
    return dres_.data();
}

LlamaBlock Llama::block(float* base, int layer) const {
    const int u = layer + 1;
    // Tensors: input norm, q, k, v, o, post-attention norm, gate, up, down. q/k/v and gate/up
    // are contiguous (the layout's 16-float alignment adds no padding when C % 16 == 0).
    // An MoE block has the router, w1 (gate), w2 (down) and w3 (up) in place of gate, up, down.
    float* q = unit_tensor(base, layout_, u, 1);
    WEFT_CHECK(unit_tensor(base, layout_, u, 3) == q + (NH_ + NKV_) * HS_ * cfg_.n_embd,
               "internal: the q/k/v weights of layer {} are not contiguous", layer);
    LlamaBlock b{unit_tensor(base, layout_, u, 0),
                 q,
                 unit_tensor(base, layout_, u, 4),
                 unit_tensor(base, layout_, u, 5),
                 nullptr,
                 nullptr,
                 {}};
    if (cfg_.qkv_bias) {
        const int last = layout_.units[size_t(u)].tensors;
        b.qkv_b = unit_tensor(base, layout_, u, last - 3);
        WEFT_CHECK(unit_tensor(base, layout_, u, last - 1) == b.qkv_b + (NH_ + NKV_) * HS_,
                   "internal: the q/k/v biases of layer {} are not contiguous", layer);
    }
    if (moe_) {
        b.moe = {unit_tensor(base, layout_, u, 6), unit_tensor(base, layout_, u, 7),
                 unit_tensor(base, layout_, u, 8), unit_tensor(base, layout_, u, 9)};
        if (cfg_.n_shared_experts > 0) {
            b.moe.shared_gu = unit_tensor(base, layout_, u, 10);
            b.moe.shared_down = unit_tensor(base, layout_, u, 12);
            WEFT_CHECK(unit_tensor(base, layout_, u, 11) ==
                           b.moe.shared_gu + cfg_.n_shared_experts * F_ * cfg_.n_embd,
                       "internal: the shared experts' gate/up weights of layer {} are not "
                       "contiguous",
                       layer);
        }
        return b;
    }
    b.gu_w = unit_tensor(base, layout_, u, 6);
    b.down_w = unit_tensor(base, layout_, u, 8);
    WEFT_CHECK(unit_tensor(base, layout_, u, 7) == b.gu_w + F_ * cfg_.n_embd,
               "internal: the gate/up weights of layer {} are not contiguous", layer);
    return b;
}

float* Llama::head_weight(UnitAccess& w, bool grads) const {
    if (cfg_.tie_embeddings) return unit_tensor(grads ? w.grads(0) : w.params(0), layout_, 0, 0);
    const int u = int(cfg_.n_layer) + 1;
    return unit_tensor(grads ? w.grads(u) : w.params(u), layout_, u, 1);
}

void Llama::embed_forward(Activations& a, UnitAccess& w, int64_t pos0) {
    check_embedding(a, pos0);
    float* wte = unit_tensor(w.params(0), layout_, 0, 0);
    if (tp_size_ > 1) ensure_scratch(a.B * a.T);
    tp_.embedding_forward(a.resid_in(0), a.inputs.data(), wte, nullptr, a.B, a.T, pos0, dC_.data());
    // Untied, the embedding is not read again in this step's forward.
    if (!cfg_.tie_embeddings) w.release(0);
}

void Llama::block_forward(Activations& a, UnitAccess& w, int l) {
    block_forward_from(acts(a), block(w.params(l + 1), l), l, w);
    w.release(l + 1);
}

int64_t Llama::row_floats(const ModelConfig& cfg, int64_t rows) {
    const Widths w = widths(cfg, 1);
    const int64_t A = w.NH * w.HS, wide = std::max({w.qkv, 2 * w.F, A});
    // x, ln, qkv, att, act, y and the norm's statistics; `wide` for the gate/up product's
    // [gate | up] (kernels::matmul_rows_swiglu's); an MoE layer's own on top.
    return rows * (3 * cfg.n_embd + w.qkv + A + wide + w.F + 1) +
           (cfg.n_experts > 0 ? MoeMlp::row_floats(cfg, rows) : 0);
}

void Llama::forward_rows(const RowBatch& b, UnitAccess& w, KvPool& kv, RowProducts& mm,
                         float* logits) {
    check_rows(b);
    const int64_t R = b.rows(), C = cfg_.n_embd, A = NH_ * HS_, L = cfg_.n_layer;
    // Counted by row_floats: change both together.
    Buffer x(R * C), ln(R * C), qkv(R * qkv_), att(R * A), act(R * F_), y(R * C);
    Buffer rstd(R);
    const float* wte = unit_tensor(w.params(0), layout_, 0, 0);
    tp_.embed_rows(x.data(), b.tokens.data(), wte, R);
    for (int64_t r = 0; r < R; ++r)
        if (b.tokens[size_t(r)] >= cfg_.vocab_size)
            std::copy_n(b.embedding(r, wte, cfg_.vocab_size, C), C, x.data() + r * C);
    if (!cfg_.tie_embeddings) w.release(0);
    auto add = [&](float* to, const float* from) {
        for (int64_t i = 0; i < R * C; ++i) to[i] += from[i];
    };
    const kernels::RopeTable& table = rope(cfg_.n_positions);
    for (int l = 0; l < L; ++l) {
        const LlamaBlock p = block(w.params(l + 1), l);
        norm_.forward(ln.data(), {nullptr, rstd.data()}, x.data(), {p.ln1_w}, R);
        mm(qkv.data(), ln.data(), p.qkv_w, p.qkv_b, R, C, qkv_);
        // Rotary positions on kv head g's queries and key, as attend_rows stores the key.
        const int64_t G = NH_ / NKV_;
        auto rope_head = [&](float* q, float* key, int64_t pos) {
            k::rope_forward(q, 1, 1, G, HS_, G * HS_, pos, table);
            k::rope_forward(key, 1, 1, 1, HS_, HS_, pos, table);
        };
        attend_rows(att.data(), qkv.data(), qkv_, b, kv, l, NH_, NKV_, HS_, rope_head);
        tp_.row_parallel_rows(y.data(), att.data(), p.o_w, nullptr, R, A, mm);
        add(x.data(), y.data());
        norm_.forward(ln.data(), {nullptr, rstd.data()}, x.data(), {p.ln2_w}, R);
        if (moe_) {
            moe_->forward_rows(
                y.data(), ln.data(), x.data(), p.moe, R, mm,
                cfg_.moe_router_bias_rate > 0 ? router_bias_.data() + l * cfg_.n_experts : nullptr);
            std::copy_n(y.data(), R * C, x.data());
        } else {
            mm.swiglu(act.data(), ln.data(), p.gu_w, R, C, F_);
            tp_.row_parallel_rows(y.data(), act.data(), p.down_w, nullptr, R, F_, mm);
            add(x.data(), y.data());
        }
        w.release(l + 1);
    }
    const int64_t n = int64_t(b.logit_rows.size());
    for (int64_t i = 0; i < n; ++i)
        std::copy_n(x.data() + b.logit_rows[size_t(i)] * C, C, y.data() + i * C);
    const int u = int(L) + 1;
    norm_.forward(ln.data(), {nullptr, rstd.data()}, y.data(),
                  {unit_tensor(w.params(u), layout_, u, 0)}, n);
    tp_.head_rows(logits, ln.data(), head_weight(w, false), b, mm);
    w.release(u);
    if (cfg_.tie_embeddings) w.release(0);
}

AttentionCore Llama::attention(LlamaActivations& a, int64_t slot) const {
    const int64_t BT = a.B * a.T;
    return {a.B,
            a.T,
            NH_,
            NKV_,
            HS_,
            a.qkv,
            slot * BT * qkv_,
            a.atty,
            slot * BT * NH_ * HS_,
            a.lse.data() + slot * a.B * NH_ * a.T,
            a.cu_seqlens,
            a.cp_doc_blocks,
            &a.cp_doc_order};
}

void Llama::block_forward_from(LlamaActivations& a, const LlamaBlock& p, int l, UnitAccess& w,
                               bool recomputing) {
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    const int64_t A = NH_ * HS_;
    ensure_scratch(BT);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    // bf16: the norms', q/k/v, attention, gate/up and SwiGLU outputs are made in fp32 in scratch
    // that is free in forward (dC_, dqkv_, wide_, dact_) and rounded into the kept buffers.
    const bool attn16 = a.qkv.bf16();
    const int64_t at_ln = s * BT * C, at_qkv = s * BT * qkv_, at_att = s * BT * A;
    const int64_t at_gu = s * BT * 2 * F_, at_act = s * BT * F_;
    float* ln1 = a.ln1.bf16() ? dC_.data() : a.ln1.f32() + at_ln;
    float* qkv = attn16 ? dqkv_.data() : a.qkv.f32() + at_qkv;
    float* atty = attn16 ? wide_.data() : a.atty.f32() + at_att;
    float* res2 = a.resid2.data() + s * R * C;
    float* ln2 = a.ln2.bf16() ? dC_.data() : a.ln2.f32() + at_ln;
    // Empty with experts (no offset into a null buffer).
    float* gu = moe_ ? nullptr : a.gu.bf16() ? wide_.data() : a.gu.f32() + at_gu;
    float* act = moe_ ? nullptr : a.act.bf16() ? dact_.data() : a.act.f32() + at_act;
    float* out = a.resid_in(l + 1);

    norm_.forward(ln1, {nullptr, a.rstd1.data() + s * R}, x, {p.ln1_w}, R);
    keep_and_project(qkv, ln1, a.ln1, at_ln, p.qkv_w, p.qkv_b, BT, C, qkv_);
    w.progress();
    const kernels::RopeTable& table = rope(cfg_.n_positions);
    rope_rows(qkv, B, T, NH_, HS_, qkv_, 0, a.positions, table, false);
    rope_rows(qkv + A, B, T, NKV_, HS_, qkv_, 0, a.positions, table, false);
    if (attn16) keep_rounded(a.qkv, at_qkv, qkv, BT, qkv_);
    attention(a, s).forward(cp_.get(), qkv, atty);
    w.progress();
    if (attn16)
        tp_.row_parallel_forward(res2, a.atty.b16() + at_att, p.o_w, nullptr, x, BT, A, R,
                                 dC_.data());
    else
        tp_.row_parallel_forward(res2, atty, p.o_w, nullptr, x, BT, A, R, dC_.data());
    w.progress();
    norm_.forward(ln2, {nullptr, a.rstd2.data() + s * R}, res2, {p.ln2_w}, R);
    if (moe_) {
        moe_->forward(
            a.moe[size_t(s)], a.moe_counts[size_t(l - a.first_layer)], out, ln2, res2, p.moe, BT,
            a.loss_scale, recomputing, moe_comm_, &moe_stats_, l,
            cfg_.moe_router_bias_rate > 0 ? router_bias_.data() + l * cfg_.n_experts : nullptr);
        return;
    }
    if (a.act.bf16()) {
        // [gate | up] is kept as bf16 and the SwiGLU reads it so, as its backward will: the
        // product writes it rounded and the SwiGLU rounds its output into the kept act, with no
        // fp32 copy of either (as GPT-2's fc and GELU).
        keep_and_project_kept(a.gu, at_gu, ln2, a.ln2, at_ln, p.gu_w, nullptr, BT, C, 2 * F_, gu);
        w.progress();
        k::swiglu_forward_bf16(a.act.b16() + at_act, a.gu.b16() + at_gu, BT, F_);
        tp_.row_parallel_forward(out, a.act.b16() + at_act, p.down_w, nullptr, res2, BT, F_, R,
                                 dC_.data());
    } else {
        keep_and_project(gu, ln2, a.ln2, at_ln, p.gu_w, nullptr, BT, C, 2 * F_);
        w.progress();
        k::swiglu_forward(act, gu, BT, F_);
        tp_.row_parallel_forward(out, act, p.down_w, nullptr, res2, BT, F_, R, dC_.data());
    }
}

double Llama::head_forward(Activations& base, UnitAccess& w, bool train, float loss_scale) {
    LlamaActivations& a = acts(base);
    WEFT_CHECK(a.head && a.first_layer + a.n_layers == cfg_.n_layer,
               "internal: the head needs the output of the last layer");
    const int64_t BT = a.B * a.T, R = a.rows();
    const int u = int(cfg_.n_layer) + 1;
    if (tp_size_ > 1) ensure_scratch(BT);
    float* norm = unit_tensor(w.params(u), layout_, u, 0);
    norm_.forward(a.lnf.data(), {nullptr, a.lnf_rstd.data()}, a.resid_in(int(cfg_.n_layer)), {norm},
                  R);
    tp_.head(a.losses.data(), a.dlnf.data(), train ? head_weight(w, true) : nullptr, a.lnf.data(),
             head_weight(w, false), a.targets.data(), BT, R, train, loss_scale, dC_.data(),
             &a.soft_targets);
    w.release(u);
    if (cfg_.tie_embeddings) w.release(0);
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
    return sum;
}

void Llama::head_backward(Activations& base, UnitAccess& w) {
    LlamaActivations& a = acts(base);
    const int64_t BT = a.B * a.T, R = a.rows();
    const int u = int(cfg_.n_layer) + 1;
    ensure_scratch(BT);
    float* norm = unit_tensor(w.params(u), layout_, u, 0);
    float* gnorm = unit_tensor(w.grads(u), layout_, u, 0);
    dres_.zero();
    norm_.begin_backward();
    norm_.backward(0, dres_.data(), {gnorm}, a.dlnf.data(), a.resid_in(int(cfg_.n_layer)), {norm},
                   {nullptr, a.lnf_rstd.data()}, R);
    norm_.end_backward();
    w.release(u);
    w.grads_ready(u);
}

void Llama::block_backward(Activations& base, UnitAccess& w, int l) {
    LlamaActivations& a = acts(base);
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, R = a.rows();
    const int64_t A = NH_ * HS_;
    ensure_scratch(BT);
    LlamaBlock p = block(w.params(l + 1), l);
    LlamaBlock g = block(w.grads(l + 1), l);
    if (a.recompute) block_forward_from(a, p, l, w, /*recomputing=*/true);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    const bool attn16 = a.qkv.bf16();
    const int64_t at_ln = s * BT * C, at_att = s * BT * A;
    const int64_t at_gu = s * BT * 2 * F_, at_act = s * BT * F_;
    const float* res2 = a.resid2.data() + s * R * C;
    float *dres = dres_.data(), *dC = dC_.data(), *wide = wide_.data();
    norm_.begin_backward();

    // dres: the gradient of the block's output (this rank's rows), flowing unchanged through
    // both residual connections; the norms' backwards add their share into it.
    const float* dout = tp_.gather_grad(dres, R, dC);
    if (moe_) {
        // dout is dres itself (no sequence parallelism with experts), and dC free for the input
        // gradient: whole and the same on every tp rank, as the block ran replicated.
        moe_->backward(dC, dout, a.ln2.f32() + at_ln, a.moe[size_t(s)],
                       a.moe_counts[size_t(l - a.first_layer)], p.moe, g.moe, BT, a.loss_scale);
    } else {
        backward_kept(dact_.data(), g.down_w, nullptr, dout, a.act, at_act, p.down_w, BT, F_, C);
        w.progress();
        if (a.gu.bf16()) {
            // The gate/up products read this gradient only rounded: it is written so.
            uint16_t* dgu16 = reinterpret_cast<uint16_t*>(wide);
            k::swiglu_backward_bf16(dgu16, dact_.data(), a.gu.b16() + at_gu, BT, F_);
            backward_kept_bf16_dout(dC, g.gu_w, dgu16, a.ln2, at_ln, p.gu_w, BT, C, 2 * F_);
        } else {
            k::swiglu_backward(wide, dact_.data(), a.gu.f32() + at_gu, BT, F_);
            backward_kept(dC, g.gu_w, nullptr, wide, a.ln2, at_ln, p.gu_w, BT, C, 2 * F_);
        }
    }
    w.progress();
    // The dense MLP's column-parallel input gradient is a partial sum over tp; the replicated
    // MoE block's is already whole.
    norm_.backward(1, dres, {g.ln2_w}, moe_ ? dC : tp_.sum_input_grad(dC, BT, R, rows_.data()),
                   res2, {p.ln2_w}, {nullptr, a.rstd2.data() + s * R}, R);
    dout = tp_.gather_grad(dres, R, dC);
    float* datty = wide;  // free again
    // The bf16 kernel takes the output's gradient rounded to bf16, as the products round it:
    // o_proj's backward writes it so, at wide_ (the fp32 scratch of emulated products past it;
    // dC_ may hold dout under sequence parallelism).
    uint16_t* datty16 = reinterpret_cast<uint16_t*>(wide);
    if (attn16)
        backward_kept_rounded(datty16, wide + BT * A, g.o_w, nullptr, dout, a.atty, at_att, p.o_w,
                              BT, A, C);
    else
        backward_kept(datty, g.o_w, nullptr, dout, a.atty, at_att, p.o_w, BT, A, C);
    w.progress();
    float* dqkv = dqkv_.data();
    attention(a, s).backward(cp_.get(), dqkv, datty, datty16);
    w.progress();
    // The rotary embedding is a rotation: its backward rotates the gradients back.
    const kernels::RopeTable& table = rope(cfg_.n_positions);
    rope_rows(dqkv_.data(), B, T, NH_, HS_, qkv_, 0, a.positions, table, true);
    rope_rows(dqkv_.data() + A, B, T, NKV_, HS_, qkv_, 0, a.positions, table, true);
    backward_kept(dC, g.qkv_w, g.qkv_b, dqkv_.data(), a.ln1, at_ln, p.qkv_w, BT, C, qkv_);
    norm_.backward(0, dres, {g.ln1_w}, tp_.sum_input_grad(dC, BT, R, rows_.data()), x, {p.ln1_w},
                   {nullptr, a.rstd1.data() + s * R}, R);
    norm_.end_backward();
    w.release(l + 1);
    w.grads_ready(l + 1);
}

void Llama::embed_backward(Activations& a, UnitAccess& w) {
    check_activations(a);
    ensure_scratch(a.B * a.T);
    float* dwte = unit_tensor(w.grads(0), layout_, 0, 0);
    tp_.embedding_backward(dwte, nullptr, dres_.data(), a.inputs.data(), a.B, a.T, dC_.data());
    w.release(0);
    w.grads_ready(0);
}

}  // namespace weft::model
