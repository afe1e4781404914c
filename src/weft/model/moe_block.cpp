#include "weft/model/moe_block.hpp"

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/matmul_rows.hpp"
#include "weft/kernels/moe_router.hpp"
#include "weft/kernels/swiglu.hpp"
#include "weft/model/row_products.hpp"
#include "weft/model/weight_grads.hpp"

namespace weft::model {

namespace k = weft::kernels;

MoeLayerActs::MoeLayerActs(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    probs = Buffer(N * E);
    lse = Buffer(N);
    weight = Buffer(N * K);
    gu = Buffer(N * K * 2 * F);
    act = Buffer(N * K * F);
    y = Buffer(N * K * C);
    expert.assign(size_t(N * K), 0);
    const int64_t SF = cfg.n_shared_experts * F;
    shared_gu = Buffer(N * 2 * SF);
    shared_act = Buffer(N * SF);
}

int64_t MoeLayerActs::floats(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    // The plan: slot_of_row and row_of_slot (N k each, int32), offsets (E + 1 int64).
    const int64_t plan = 2 * N * K + 2 * (E + 1);
    const int64_t SF = cfg.n_shared_experts * F;
    return N * E + N + N * K + N * K * (3 * F + C) + N * K + plan + N * 3 * SF;
}

void moe_update_router_bias(float* bias, const double* load, int64_t E, double rate) {
    double mean = 0;
    for (int64_t e = 0; e < E; ++e) mean += load[e];
    mean /= double(E);
    for (int64_t e = 0; e < E; ++e)
        bias[e] += float(load[e] < mean ? rate : load[e] > mean ? -rate : 0.0);
}

MoeMlp::MoeMlp(const ModelConfig& cfg)
    : cfg_(cfg),
      E_(cfg.n_experts),
      k_(cfg.experts_per_token),
      F_(cfg.ffn()),
      C_(cfg.n_embd),
      SF_(cfg.n_shared_experts * cfg.ffn()),
      EL_(cfg.n_experts) {
    WEFT_CHECK(E_ > 0 && k_ >= 1 && k_ <= E_,
               "internal: an MoE layer of {} experts with {} per token", E_, k_);
}

void MoeMlp::set_expert_comm(ExpertComm* comm) {
    const int ep = comm ? comm->size() : 1;
    WEFT_CHECK(E_ % ep == 0, "{} experts do not split over expert-parallel degree {}", E_, ep);
    ep_comm_ = ep > 1 ? comm : nullptr;
    EL_ = E_ / ep;
}

void MoeMlp::rank_rows(const MoeLayerActs& a) {
    const int ep = ep_comm_->size();
    send_rows_.assign(size_t(ep), 0);
    recv_rows_.assign(size_t(ep), 0);
    for (int j = 0; j < ep; ++j)
        for (int64_t l = 0; l < EL_; ++l) {
            send_rows_[size_t(j)] += a.ep_send[size_t(j * EL_ + l)];
            recv_rows_[size_t(j)] += a.ep_recv[size_t(j * EL_ + l)];
        }
}

std::vector<MoeMlp::Block> MoeMlp::blocks_of(const MoeLayerActs& a) const {
    std::vector<Block> blocks;
    if (!ep_comm_) {
        for (int64_t e = 0; e < E_; ++e)
            blocks.push_back({e, a.plan.offsets[size_t(e)], a.plan.rows_of(e)});
        return blocks;
    }
    int64_t r0 = 0;
    for (size_t i = 0; i < a.ep_recv.size(); ++i) {
        const int64_t n = a.ep_recv[i];
        blocks.push_back({int64_t(i) % EL_, r0, n});
        r0 += n;
    }
    return blocks;
}

std::vector<MoeMlp::Block> MoeMlp::dispatch_forward(MoeLayerActs& a, int64_t* rows) {
    if (!ep_comm_) {
        *rows = a.plan.rows();
        return blocks_of(a);
    }
    // The plan groups rows by expert, hence by the rank holding it: rank j's rows are experts
    // [j EL, (j+1) EL), consecutive and in expert order.
    const int ep = ep_comm_->size();
    a.ep_send.assign(size_t(ep * EL_), 0);
    a.ep_recv.assign(size_t(ep * EL_), 0);
    for (int64_t e = 0; e < E_; ++e) a.ep_send[size_t(e)] = a.plan.rows_of(e);
    ep_comm_->exchange_counts(a.ep_send.data(), a.ep_recv.data(), EL_);
    rank_rows(a);
    int64_t R = 0;
    for (int64_t n : recv_rows_) R += n;
    a.xr.resize(size_t(R * C_));
    ep_comm_->exchange_rows(xp_.data(), send_rows_.data(), a.xr.data(), recv_rows_.data(), C_);
    a.gu_r.resize(size_t(R * 2 * F_));
    a.act_r.resize(size_t(R * F_));
    yr_.resize(size_t(R * C_));
    *rows = R;
    return blocks_of(a);
}

int64_t MoeMlp::scratch_floats(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    const int64_t SF = cfg.n_shared_experts * F;
    return N * E + 2 * N * K * C + N * K * 3 * F + N * K + N * 3 * SF;
}

int64_t MoeMlp::row_floats(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    const int64_t SF = cfg.n_shared_experts * F, S = N * K;
    // As forward_rows allocates them: logits, probs, lse, weight, xp, g, u, gu, act, y and the
    // expert ids; the shared experts' sact and sy, and their [gate | up]
    // (kernels::matmul_rows_swiglu's).
    return 2 * N * E + N + S + 2 * S * C + 5 * S * F + S + (SF > 0 ? N * 3 * SF + N * C : 0);
}

int64_t MoeMlp::deferred_floats(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    const int64_t SF = cfg.n_shared_experts * F;
    return N * K * (C + 2 * F) + N * E + (SF > 0 ? N * (C + 2 * SF) : 0);
}

void MoeMlp::ensure_scratch(int64_t N) {
    if (scratch_n_ >= N) return;
    const int64_t S = N * k_;
    logits_ = Buffer(N * E_);
    xp_ = Buffer(S * C_);
    dyp_ = Buffer(S * C_);
    dact_ = Buffer(S * F_);
    dgu_ = Buffer(S * 2 * F_);
    dweight_ = Buffer(S);
    sdact_ = Buffer(N * SF_);
    sdgu_ = Buffer(N * 2 * SF_);
    scratch_n_ = N;
}

void MoeMlp::forward(MoeLayerActs& a, std::vector<double>& counts, float* out, const float* x,
                     const float* residual, const MoeWeights& p, int64_t N, double loss_scale,
                     bool counts_known, MoeComm* comm, MoeStats* stats, int layer,
                     const float* selection_bias) {
    ensure_scratch(N);
    const int64_t E = E_, K = k_, F = F_, C = C_;
    const bool train = loss_scale > 0;
    // The router in fp32 whatever the matmul precision: its logits pick the experts, and a
    // rounding flip would route a token elsewhere (Megatron-LM and Hugging Face keep it fp32).
    {
        k::MatmulPrecisionScope fp32(k::MatmulPrecision::fp32);
        k::matmul_forward(logits_.data(), x, p.router, nullptr, N, C, E);
    }
    k::moe_router_forward(a.probs.data(), a.lse.data(), a.expert.data(), a.weight.data(),
                          logits_.data(), N, E, K, cfg_.moe_renormalize, selection_bias);
    if (!counts_known) {
        counts.assign(size_t(E), 0.0);
        k::moe_router_counts(counts.data(), a.expert.data(), N, K, E);
        if (train && stats)
            for (int64_t e = 0; e < E; ++e) stats->tokens[size_t(layer * E + e)] += counts[e];
        if (train && comm) comm->sum_counts(counts.data(), E);
    }
    k::moe_plan(a.plan, a.expert.data(), a.weight.data(), N, E, K,
                k::moe_capacity(cfg_.moe_capacity_factor, N, E, K));
    const k::MoePlan& plan = a.plan;
    k::moe_permute(xp_.data(), x, plan, C);
    int64_t Rx = 0;  // rows on the expert side: this rank's own (ep 1) or those received
    const std::vector<Block> blocks = dispatch_forward(a, &Rx);
    const bool ep = ep_comm_ != nullptr;
    const float* xe = ep ? a.xr.data() : xp_.data();
    float* gu = ep ? a.gu_r.data() : a.gu.data();
    float* act = ep ? a.act_r.data() : a.act.data();
    float* ye = ep ? yr_.data() : a.y.data();
    for (const Block& b : blocks) {
        if (b.n == 0) continue;
        // [gate | up] rows for the SwiGLU kernel: two products writing the halves of each row.
        k::gemm(false, true, b.n, F, C, 1.0f, xe + b.r0 * C, C, p.w1 + b.local * F * C, C, 0.0f,
                gu + b.r0 * 2 * F, 2 * F);
        k::gemm(false, true, b.n, F, C, 1.0f, xe + b.r0 * C, C, p.w3 + b.local * F * C, C, 0.0f,
                gu + b.r0 * 2 * F + F, 2 * F);
    }
    if (Rx > 0) k::swiglu_forward(act, gu, Rx, F);
    for (const Block& b : blocks) {
        if (b.n == 0) continue;
        k::gemm(false, true, b.n, C, F, 1.0f, act + b.r0 * F, F, p.w2 + b.local * C * F, F, 0.0f,
                ye + b.r0 * C, C);
    }
    // The outputs back to the rows' own ranks, in their grouped order.
    if (ep)
        ep_comm_->exchange_rows(yr_.data(), recv_rows_.data(), a.y.data(), send_rows_.data(), C);
    float* y = a.y.data();
    k::moe_unpermute(out, y, a.weight.data(), residual, plan, C);
    if (SF_ > 0) {
        // Shared experts: every token, added after the routed ones and the residual.
        k::matmul_forward(a.shared_gu.data(), x, p.shared_gu, nullptr, N, C, 2 * SF_);
        k::swiglu_forward(a.shared_act.data(), a.shared_gu.data(), N, SF_);
        k::gemm(false, true, N, C, SF_, 1.0f, a.shared_act.data(), SF_, p.shared_down, SF_, 1.0f,
                out, C);
    }
    if (train && stats && !counts_known) {
        const k::MoeRouterLoss l =
            k::moe_router_loss(a.probs.data(), a.lse.data(), counts.data(), N, E,
                               {cfg_.moe_aux_loss_coef, cfg_.moe_z_loss_coef}, loss_scale);
        stats->aux_loss += l.aux;
        stats->z_loss += l.z;
        stats->dropped += double(plan.dropped);
        stats->slots += double(N * K);
    }
}

void MoeMlp::forward_rows(float* out, const float* x, const float* residual, const MoeWeights& p,
                          int64_t N, RowProducts& mm, const float* selection_bias) {
    WEFT_CHECK(!ep_comm_, "internal: a forward over rows with expert parallelism");
    const int64_t E = E_, K = k_, F = F_, C = C_, S = N * K;
    // Counted by row_floats: change both together.
    auto floats = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n)); };
    std::vector<float> logits = floats(N * E), probs = floats(N * E), lse = floats(N),
                       weight = floats(S), xp = floats(S * C), g = floats(S * F), u = floats(S * F),
                       gu = floats(S * 2 * F), act = floats(S * F), y = floats(S * C);
    std::vector<int32_t> expert(static_cast<size_t>(S));
    k::matmul_rows(logits.data(), x, p.router, nullptr, N, C, E);
    k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), N,
                          E, K, cfg_.moe_renormalize, selection_bias);
    k::MoePlan plan;
    k::moe_plan(plan, expert.data(), weight.data(), N, E, K);
    k::moe_permute(xp.data(), x, plan, C);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t n = plan.rows_of(e), r0 = plan.offsets[size_t(e)];
        if (n == 0) continue;
        mm(g.data() + r0 * F, xp.data() + r0 * C, p.w1 + e * F * C, nullptr, n, C, F);
        mm(u.data() + r0 * F, xp.data() + r0 * C, p.w3 + e * F * C, nullptr, n, C, F);
    }
    const int64_t R = plan.rows();
    // [gate | up] rows for the SwiGLU, one row at a time (no vector tail inside a row).
    for (int64_t r = 0; r < R; ++r) {
        std::copy_n(g.data() + r * F, F, gu.data() + r * 2 * F);
        std::copy_n(u.data() + r * F, F, gu.data() + r * 2 * F + F);
        k::swiglu_forward(act.data() + r * F, gu.data() + r * 2 * F, 1, F);
    }
    for (int64_t e = 0; e < E; ++e) {
        const int64_t n = plan.rows_of(e), r0 = plan.offsets[size_t(e)];
        if (n > 0) mm(y.data() + r0 * C, act.data() + r0 * F, p.w2 + e * C * F, nullptr, n, F, C);
    }
    k::moe_unpermute(out, y.data(), weight.data(), residual, plan, C);
    if (SF_ == 0) return;
    // Shared experts: every row, added after the routed ones and the residual.
    std::vector<float> sact = floats(N * SF_), sy = floats(N * C);
    mm.swiglu(sact.data(), x, p.shared_gu, N, C, SF_);
    mm(sy.data(), sact.data(), p.shared_down, nullptr, N, SF_, C);
    for (int64_t i = 0; i < N * C; ++i) out[i] += sy[size_t(i)];
}

void MoeMlp::expert_weight_grads(const MoeLayerActs& a, const float* dy, const float* dgu,
                                 const float* xe, const MoeWeights& g) const {
    const int64_t F = F_, C = C_;
    const float* act = ep_comm_ ? a.act_r.data() : a.act.data();
    // With expert parallelism several blocks (source ranks) add to one expert, in block order.
    for (const Block& b : blocks_of(a)) {
        if (b.n == 0) continue;
        const float* dgate = dgu + b.r0 * 2 * F;
        k::gemm(true, false, C, F, b.n, 1.0f, dy + b.r0 * C, C, act + b.r0 * F, F, 1.0f,
                g.w2 + b.local * C * F, F);
        k::gemm(true, false, F, C, b.n, 1.0f, dgate, 2 * F, xe + b.r0 * C, C, 1.0f,
                g.w1 + b.local * F * C, C);
        k::gemm(true, false, F, C, b.n, 1.0f, dgate + F, 2 * F, xe + b.r0 * C, C, 1.0f,
                g.w3 + b.local * F * C, C);
    }
}

void MoeMlp::token_weight_grads(const float* x, const MoeLayerActs& a, const float* dout,
                                const float* sdgu, const float* dlogits, const MoeWeights& g,
                                int64_t N) const {
    if (SF_ > 0) {
        k::matmul_backward(nullptr, g.shared_down, nullptr, dout, a.shared_act.data(), nullptr, N,
                           SF_, C_, false);
        k::matmul_backward(nullptr, g.shared_gu, nullptr, sdgu, x, nullptr, N, C_, 2 * SF_, false);
    }
    k::MatmulPrecisionScope fp32(k::MatmulPrecision::fp32);
    k::matmul_backward(nullptr, g.router, nullptr, dlogits, x, nullptr, N, C_, E_, false);
}

void MoeMlp::backward(float* dx, const float* dout, const float* x, const MoeLayerActs& a,
                      const std::vector<double>& counts, const MoeWeights& p, const MoeWeights& g,
                      int64_t N, double loss_scale) {
    ensure_scratch(N);
    const int64_t E = E_, K = k_, F = F_, C = C_;
    const k::MoePlan& plan = a.plan;
    const int64_t R = plan.rows();
    // Under DeferWeightGrads (the zero-bubble schedules' B) the weights' gradients wait for the
    // W, with copies of the gradients they read from scratch; the rest they read (x, the kept
    // activations, the rows received) stays as it is until then.
    WeightGradQueue* defer = DeferWeightGrads::current();
    float *dyp = dyp_.data(), *dact = dact_.data(), *dgu = dgu_.data(), *xp = xp_.data();
    k::moe_unpermute_backward(dyp, dweight_.data(), dout, a.y.data(), a.weight.data(), plan, C);
    const bool ep = ep_comm_ != nullptr;
    const std::vector<Block> blocks = blocks_of(a);
    int64_t Rx = R;
    if (ep) {
        // The mirror of forward: output gradients to the experts' ranks, input gradients back.
        rank_rows(a);
        Rx = 0;
        for (int64_t n : recv_rows_) Rx += n;
        dyr_.resize(size_t(Rx * C));
        dact_r_.resize(size_t(Rx * F));
        dgu_r_.resize(size_t(Rx * 2 * F));
        yr_.resize(size_t(Rx * C));
        ep_comm_->exchange_rows(dyp, send_rows_.data(), dyr_.data(), recv_rows_.data(), C);
        dyp = dyr_.data(), dact = dact_r_.data(), dgu = dgu_r_.data();
    }
    const float* gu = ep ? a.gu_r.data() : a.gu.data();
    for (const Block& b : blocks) {
        if (b.n == 0) continue;
        k::gemm(false, false, b.n, F, C, 1.0f, dyp + b.r0 * C, C, p.w2 + b.local * C * F, F, 0.0f,
                dact + b.r0 * F, F);
    }
    if (Rx > 0) k::swiglu_backward(dgu, dact, gu, Rx, F);
    // The grouped input again (not kept: one copy of rows is cheaper than N k C floats per
    // layer), in the W when deferred; with ep the rows received are kept (they came over the
    // wire).
    const float* dy_w = dyp;
    const float* dgu_w = dgu;
    if (defer) {
        dy_w = defer->keep(dyp, Rx * C);
        dgu_w = defer->keep(dgu, Rx * 2 * F);
    } else {
        if (!ep) k::moe_permute(xp, x, plan, C);
        expert_weight_grads(a, dyp, dgu, ep ? a.xr.data() : xp, g);
    }
    float* dxe = ep ? yr_.data() : dyp;  // free again
    for (const Block& b : blocks) {
        if (b.n == 0) continue;
        const float* dgate = dgu + b.r0 * 2 * F;
        const float* dup = dgate + F;
        k::gemm(false, false, b.n, C, F, 1.0f, dgate, 2 * F, p.w1 + b.local * F * C, C, 0.0f,
                dxe + b.r0 * C, C);
        k::gemm(false, false, b.n, C, F, 1.0f, dup, 2 * F, p.w3 + b.local * F * C, C, 1.0f,
                dxe + b.r0 * C, C);
    }
    float* dxp = dyp_.data();
    if (ep) ep_comm_->exchange_rows(dxe, recv_rows_.data(), dxp, send_rows_.data(), C);
    k::moe_permute_backward(dx, dxp, plan, C, /*accumulate=*/false);
    if (SF_ > 0) {
        k::matmul_backward(sdact_.data(), nullptr, nullptr, dout, a.shared_act.data(),
                           p.shared_down, N, SF_, C, false);
        k::swiglu_backward(sdgu_.data(), sdact_.data(), a.shared_gu.data(), N, SF_);
        k::matmul_backward(dx, nullptr, nullptr, sdgu_.data(), x, p.shared_gu, N, C, 2 * SF_,
                           /*accumulate_dinp=*/true);
    }
    float* dlogits = logits_.data();
    k::moe_router_backward(dlogits, dweight_.data(), a.probs.data(), a.lse.data(), a.expert.data(),
                           counts.data(), N, E, K, cfg_.moe_renormalize,
                           {cfg_.moe_aux_loss_coef, cfg_.moe_z_loss_coef}, loss_scale);
    {
        k::MatmulPrecisionScope fp32(k::MatmulPrecision::fp32);
        k::matmul_backward(dx, nullptr, nullptr, dlogits, x, p.router, N, C, E,
                           /*accumulate_dinp=*/true);
    }
    if (!defer) return token_weight_grads(x, a, dout, sdgu_.data(), dlogits, g, N);
    const float* dout_w = SF_ > 0 ? defer->keep(dout, N * C) : nullptr;
    const float* sdgu_w = SF_ > 0 ? defer->keep(sdgu_.data(), N * 2 * SF_) : nullptr;
    const float* dlogits_w = defer->keep(dlogits, N * E);
    defer->defer_call([=, this, &a] {
        const float* xe = a.xr.data();
        if (!ep) {
            k::moe_permute(xp_.data(), x, a.plan, C_);
            xe = xp_.data();
        }
        expert_weight_grads(a, dy_w, dgu_w, xe, g);
        token_weight_grads(x, a, dout_w, sdgu_w, dlogits_w, g, N);
    });
}

}  // namespace weft::model
