#include "weft/model/gpt2.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/gelu.hpp"
#include "weft/kernels/layernorm.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::model {

namespace k = weft::kernels;

Activations::Activations(const ModelConfig& cfg, int64_t B_, int64_t T_, LayerSpan span)
    : B(B_),
      T(T_),
      first_layer(span.first),
      n_layers(span.count < 0 ? int(cfg.n_layer) - span.first : span.count),
      head(span.head),
      recompute(span.recompute),
      n_embd_(cfg.n_embd) {
    WEFT_CHECK(T <= cfg.n_positions, "sequence length {} exceeds the model's n_positions {}", T,
               cfg.n_positions);
    WEFT_CHECK(first_layer >= 0 && n_layers >= 0 && first_layer + n_layers <= cfg.n_layer,
               "internal: layers {}..{} of a model of {}", first_layer, first_layer + n_layers,
               cfg.n_layer);
    const int64_t BT = B * T, C = cfg.n_embd, NH = cfg.n_head;
    const int64_t L = recompute ? std::min<int64_t>(1, n_layers) : n_layers;
    inputs.assign(size_t(BT), 0);
    targets.assign(size_t(BT), -1);
    resid = Buffer((n_layers + 1) * BT * C);
    ln1 = Buffer(L * BT * C);
    ln1_mean = Buffer(L * BT);
    ln1_rstd = Buffer(L * BT);
    qkv = Buffer(L * BT * 3 * C);
    atty = Buffer(L * BT * C);
    lse = Buffer(L * B * NH * T);
    resid2 = Buffer(L * BT * C);
    ln2 = Buffer(L * BT * C);
    ln2_mean = Buffer(L * BT);
    ln2_rstd = Buffer(L * BT);
    fch = Buffer(L * BT * 4 * C);
    fch_gelu = Buffer(L * BT * 4 * C);
    if (head) {
        lnf = Buffer(BT * C);
        lnf_mean = Buffer(BT);
        lnf_rstd = Buffer(BT);
        dlnf = Buffer(BT * C);
        losses = Buffer(BT);
    }
}

int64_t Activations::floats(const ModelConfig& cfg, int64_t B, int64_t T, LayerSpan span) {
    const int64_t BT = B * T, C = cfg.n_embd, NH = cfg.n_head;
    const int64_t n = span.count < 0 ? cfg.n_layer - span.first : span.count;
    const int64_t kept = span.recompute ? std::min<int64_t>(1, n) : n;
    // Per block: ln1, qkv(3), atty, resid2, ln2, fch(4), fch_gelu(4) = 15 C per token, four
    // LayerNorm statistics and the attention log-sum-exp per head; plus each layer's input.
    const int64_t per_block = BT * 15 * C + 4 * BT + B * NH * T;
    // The last residual; the final norm and its gradient, statistics and losses; the int32
    // inputs and targets count as one float each.
    const int64_t head = span.head ? BT * C * 2 + BT * 3 : 0;
    return kept * per_block + (n + 1) * BT * C + head + 2 * BT;
}

Gpt2::Gpt2(const ModelConfig& cfg, const ModelShard& shard)
    : cfg_(cfg), layout_(build_param_layout(cfg, shard)) {
    cfg_.validate("model config");
}

int64_t Gpt2::scratch_floats(const ModelConfig& cfg, int64_t B, int64_t T) {
    return B * T * cfg.n_embd * (1 + 1 + 3 + 4);
}

void Gpt2::ensure_scratch(int64_t BT) {
    if (scratch_bt_ >= BT) return;
    const int64_t C = cfg_.n_embd;
    dres_ = Buffer(BT * C);
    dC_ = Buffer(BT * C);
    d3C_ = Buffer(BT * 3 * C);
    d4C_ = Buffer(BT * 4 * C);
    scratch_bt_ = BT;
}

float* Gpt2::dresid(int64_t B, int64_t T) {
    ensure_scratch(B * T);
    return dres_.data();
}

void Gpt2::embed_forward(Activations& a, UnitAccess& w) {
    WEFT_CHECK(a.first_layer == 0, "internal: the embedding feeds layer 0, not {}", a.first_layer);
    EmbedView e = embed_view(w.params(0), layout_);
    k::embedding_forward(a.resid_in(0), a.inputs.data(), e.wte, e.wpe, a.B, a.T, cfg_.n_embd);
}

void Gpt2::block_forward(Activations& a, UnitAccess& w, int l) {
    block_forward_from(a, block_view(w.params(l + 1), layout_, l), l);
    w.release(l + 1);
}

void Gpt2::block_forward_from(Activations& a, const BlockView& p, int l) {
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, NH = cfg_.n_head;
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    float* ln1 = a.ln1.data() + s * BT * C;
    float* qkv = a.qkv.data() + s * BT * 3 * C;
    float* atty = a.atty.data() + s * BT * C;
    float* res2 = a.resid2.data() + s * BT * C;
    float* ln2 = a.ln2.data() + s * BT * C;
    float* fch = a.fch.data() + s * BT * 4 * C;
    float* fcg = a.fch_gelu.data() + s * BT * 4 * C;
    float* out = a.resid_in(l + 1);

    k::layernorm_forward(ln1, a.ln1_mean.data() + s * BT, a.ln1_rstd.data() + s * BT, x, p.ln1_w,
                         p.ln1_b, BT, C, cfg_.ln_eps);
    k::matmul_forward(qkv, ln1, p.qkv_w, p.qkv_b, BT, C, 3 * C);
    k::attention_forward_qkv(atty, a.lse.data() + s * B * NH * T, qkv, B, T, NH, C / NH);
    k::matmul_forward(res2, atty, p.proj_w, p.proj_b, BT, C, C);
    k::add_inplace(res2, x, BT * C);
    k::layernorm_forward(ln2, a.ln2_mean.data() + s * BT, a.ln2_rstd.data() + s * BT, res2, p.ln2_w,
                         p.ln2_b, BT, C, cfg_.ln_eps);
    k::matmul_forward(fch, ln2, p.fc_w, p.fc_b, BT, C, 4 * C);
    k::gelu_forward(fcg, fch, BT * 4 * C);
    k::matmul_forward(out, fcg, p.fcproj_w, p.fcproj_b, BT, 4 * C, C);
    k::add_inplace(out, res2, BT * C);
}

double Gpt2::head_forward(Activations& a, UnitAccess& w, bool train, float loss_scale) {
    WEFT_CHECK(a.head && a.first_layer + a.n_layers == cfg_.n_layer,
               "internal: the head needs the output of the last layer");
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, L = cfg_.n_layer;
    FinalView f = final_view(w.params(L + 1), layout_, int(L));
    const float* x = a.resid_in(int(L));
    k::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, f.lnf_w, f.lnf_b,
                         BT, C, cfg_.ln_eps);
    EmbedView e = embed_view(w.params(0), layout_);
    float* dwte = train ? embed_view(w.grads(0), layout_).wte : nullptr;
    k::classifier_forward_backward(a.losses.data(), train ? a.dlnf.data() : nullptr, dwte,
                                   a.lnf.data(), e.wte, a.targets.data(), BT, C, cfg_.vocab_size,
                                   loss_scale);
    w.release(L + 1);
    w.release(0);
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
    return sum;
}

void Gpt2::head_backward(Activations& a, UnitAccess& w) {
    const int64_t BT = a.B * a.T, C = cfg_.n_embd, L = cfg_.n_layer;
    ensure_scratch(BT);
    FinalView f = final_view(w.params(L + 1), layout_, int(L));
    FinalView g = final_view(w.grads(L + 1), layout_, int(L));
    dres_.zero();
    k::layernorm_backward(dres_.data(), g.lnf_w, g.lnf_b, a.dlnf.data(),
                          a.resid_in(int(L)), f.lnf_w, a.lnf_mean.data(),
                          a.lnf_rstd.data(), BT, C);
    w.release(L + 1);
    w.grads_ready(L + 1);
}

void Gpt2::block_backward(Activations& a, UnitAccess& w, int l) {
    const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.n_embd, NH = cfg_.n_head;
    ensure_scratch(BT);
    BlockView p = block_view(w.params(l + 1), layout_, l);
    BlockView g = block_view(w.grads(l + 1), layout_, l);
    if (a.recompute) block_forward_from(a, p, l);
    const int64_t s = a.slot(l);
    const float* x = a.resid_in(l);
    const float* ln1 = a.ln1.data() + s * BT * C;
    const float* qkv = a.qkv.data() + s * BT * 3 * C;
    const float* atty = a.atty.data() + s * BT * C;
    const float* res2 = a.resid2.data() + s * BT * C;
    const float* ln2 = a.ln2.data() + s * BT * C;
    const float* fch = a.fch.data() + s * BT * 4 * C;
    const float* fcg = a.fch_gelu.data() + s * BT * 4 * C;
    float *dres = dres_.data(), *dC = dC_.data(), *d3C = d3C_.data(), *d4C = d4C_.data();

    // dres holds the gradient of this block's output; the residual connections mean it flows
    // unchanged to resid2 and to x, and the LayerNorm backwards add their share into it.
    k::matmul_backward(d4C, g.fcproj_w, g.fcproj_b, dres, fcg, p.fcproj_w, BT, 4 * C, C, false);
    k::gelu_backward(d4C, fch, d4C, BT * 4 * C);
    k::matmul_backward(dC, g.fc_w, g.fc_b, d4C, ln2, p.fc_w, BT, C, 4 * C, false);
    k::layernorm_backward(dres, g.ln2_w, g.ln2_b, dC, res2, p.ln2_w, a.ln2_mean.data() + s * BT,
                          a.ln2_rstd.data() + s * BT, BT, C);
    k::matmul_backward(dC, g.proj_w, g.proj_b, dres, atty, p.proj_w, BT, C, C, false);
    k::attention_backward_qkv(d3C, dC, qkv, atty, a.lse.data() + s * B * NH * T, B, T, NH, C / NH);
    k::matmul_backward(dC, g.qkv_w, g.qkv_b, d3C, ln1, p.qkv_w, BT, C, 3 * C, false);
    k::layernorm_backward(dres, g.ln1_w, g.ln1_b, dC, x, p.ln1_w, a.ln1_mean.data() + s * BT,
                          a.ln1_rstd.data() + s * BT, BT, C);
    w.release(l + 1);
    w.grads_ready(l + 1);
}

void Gpt2::embed_backward(Activations& a, UnitAccess& w) {
    EmbedView g = embed_view(w.grads(0), layout_);
    k::embedding_backward(g.wte, g.wpe, dres_.data(), a.inputs.data(), a.B, a.T, cfg_.n_embd);
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
