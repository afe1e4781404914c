#include "weft/model/moe_block.hpp"

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/moe_router.hpp"
#include "weft/kernels/swiglu.hpp"

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

MoeMlp::MoeMlp(const ModelConfig& cfg)
    : cfg_(cfg),
      E_(cfg.n_experts),
      k_(cfg.experts_per_token),
      F_(cfg.ffn()),
      C_(cfg.n_embd),
      SF_(cfg.n_shared_experts * cfg.ffn()) {
    WEFT_CHECK(E_ > 0 && k_ >= 1 && k_ <= E_,
               "internal: an MoE layer of {} experts with {} per token", E_, k_);
}

int64_t MoeMlp::scratch_floats(const ModelConfig& cfg, int64_t N) {
    const int64_t E = cfg.n_experts, K = cfg.experts_per_token, F = cfg.ffn(), C = cfg.n_embd;
    const int64_t SF = cfg.n_shared_experts * F;
    return N * E + 2 * N * K * C + N * K * 3 * F + N * K + N * 3 * SF;
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
                     bool counts_known, MoeComm* comm, MoeStats* stats, int layer) {
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
                          logits_.data(), N, E, K, cfg_.moe_renormalize);
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
    const int64_t R = plan.rows();
    k::moe_permute(xp_.data(), x, plan, C);
    float *gu = a.gu.data(), *act = a.act.data(), *y = a.y.data();
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = plan.offsets[size_t(e)], n = plan.rows_of(e);
        if (n == 0) continue;
        // [gate | up] rows for the SwiGLU kernel: two products writing the halves of each row.
        k::gemm(false, true, n, F, C, 1.0f, xp_.data() + r0 * C, C, p.w1 + e * F * C, C, 0.0f,
                gu + r0 * 2 * F, 2 * F);
        k::gemm(false, true, n, F, C, 1.0f, xp_.data() + r0 * C, C, p.w3 + e * F * C, C, 0.0f,
                gu + r0 * 2 * F + F, 2 * F);
    }
    if (R > 0) k::swiglu_forward(act, gu, R, F);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = plan.offsets[size_t(e)], n = plan.rows_of(e);
        if (n == 0) continue;
        k::gemm(false, true, n, C, F, 1.0f, act + r0 * F, F, p.w2 + e * C * F, F, 0.0f, y + r0 * C,
                C);
    }
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

void MoeMlp::backward(float* dx, const float* dout, const float* x, const MoeLayerActs& a,
                      const std::vector<double>& counts, const MoeWeights& p, const MoeWeights& g,
                      int64_t N, double loss_scale) {
    ensure_scratch(N);
    const int64_t E = E_, K = k_, F = F_, C = C_;
    const k::MoePlan& plan = a.plan;
    const int64_t R = plan.rows();
    const float *gu = a.gu.data(), *act = a.act.data();
    float *dyp = dyp_.data(), *dact = dact_.data(), *dgu = dgu_.data(), *xp = xp_.data();
    k::moe_unpermute_backward(dyp, dweight_.data(), dout, a.y.data(), a.weight.data(), plan, C);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = plan.offsets[size_t(e)], n = plan.rows_of(e);
        if (n == 0) continue;
        k::gemm(false, false, n, F, C, 1.0f, dyp + r0 * C, C, p.w2 + e * C * F, F, 0.0f,
                dact + r0 * F, F);
        k::gemm(true, false, C, F, n, 1.0f, dyp + r0 * C, C, act + r0 * F, F, 1.0f,
                g.w2 + e * C * F, F);
    }
    if (R > 0) k::swiglu_backward(dgu, dact, gu, R, F);
    // The grouped input again (not kept: one copy of rows is cheaper than N k C floats per layer).
    k::moe_permute(xp, x, plan, C);
    float* dxp = dyp;  // free again
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = plan.offsets[size_t(e)], n = plan.rows_of(e);
        if (n == 0) continue;
        const float* dgate = dgu + r0 * 2 * F;
        const float* dup = dgate + F;
        k::gemm(true, false, F, C, n, 1.0f, dgate, 2 * F, xp + r0 * C, C, 1.0f, g.w1 + e * F * C,
                C);
        k::gemm(true, false, F, C, n, 1.0f, dup, 2 * F, xp + r0 * C, C, 1.0f, g.w3 + e * F * C, C);
        k::gemm(false, false, n, C, F, 1.0f, dgate, 2 * F, p.w1 + e * F * C, C, 0.0f, dxp + r0 * C,
                C);
        k::gemm(false, false, n, C, F, 1.0f, dup, 2 * F, p.w3 + e * F * C, C, 1.0f, dxp + r0 * C,
                C);
    }
    k::moe_permute_backward(dx, dxp, plan, C, /*accumulate=*/false);
    if (SF_ > 0) {
        k::matmul_backward(sdact_.data(), g.shared_down, nullptr, dout, a.shared_act.data(),
                           p.shared_down, N, SF_, C, false);
        k::swiglu_backward(sdgu_.data(), sdact_.data(), a.shared_gu.data(), N, SF_);
        k::matmul_backward(dx, g.shared_gu, nullptr, sdgu_.data(), x, p.shared_gu, N, C, 2 * SF_,
                           /*accumulate_dinp=*/true);
    }
    float* dlogits = logits_.data();
    k::moe_router_backward(dlogits, dweight_.data(), a.probs.data(), a.lse.data(), a.expert.data(),
                           counts.data(), N, E, K, cfg_.moe_renormalize,
                           {cfg_.moe_aux_loss_coef, cfg_.moe_z_loss_coef}, loss_scale);
    k::MatmulPrecisionScope fp32(k::MatmulPrecision::fp32);
    k::matmul_backward(dx, g.router, nullptr, dlogits, x, p.router, N, C, E,
                       /*accumulate_dinp=*/true);
}

}  // namespace weft::model
