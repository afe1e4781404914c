#include "weft/kernels/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

constexpr int64_t kMinParallel = 1 << 12;

void check_shape(const char* what, int64_t N, int64_t E, int64_t k) {
    WEFT_CHECK(N >= 0 && E >= 1 && k >= 1 && k <= E,
               "{}: shape N={} E={} k={}, expected N >= 0 and 1 <= k <= E", what, N, E, k);
}

// f_e = counts[e] / Σ counts, or all zero for an empty batch.
std::vector<double> fractions(const double* counts, int64_t E) {
    std::vector<double> f(size_t(E), 0.0);
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += counts[e];
    if (total > 0)
        for (int64_t e = 0; e < E; ++e) f[size_t(e)] = counts[e] / total;
    return f;
}

}  // namespace

void moe_router_forward(float* probs, float* lse, int32_t* expert, float* weight,
                        const float* logits, int64_t N, int64_t E, int64_t k, bool renormalize,
                        const float* selection_bias) {
    WEFT_PROFILE("moe_router_fwd");
    check_shape("moe_router_forward", N, E, k);
#pragma omp parallel for schedule(static) if (N * E >= kMinParallel)
    for (int64_t t = 0; t < N; ++t) {
        const float* x = logits + t * E;
        float* p = probs + t * E;
        const float m = *std::max_element(x, x + E);
        float sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(x[e] - m));
        for (int64_t e = 0; e < E; ++e) p[e] /= sum;
        lse[t] = m + std::log(sum);
        // Selection by repeated maximum: k is small (1, 2, 8), and a strict '>' scanning upwards
        // gives ties to the lower index.
        int32_t* ex = expert + t * k;
        float* w = weight + t * k;
        float chosen = 0;
        auto score = [&](int64_t e) { return selection_bias ? p[e] + selection_bias[e] : p[e]; };
        for (int64_t j = 0; j < k; ++j) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; ++e) {
                if (std::find(ex, ex + j, int32_t(e)) != ex + j) continue;
                if (best < 0 || score(e) > score(best)) best = e;
            }
            ex[j] = int32_t(best);
            w[j] = p[best];
            chosen += p[best];
        }
        if (renormalize)
            for (int64_t j = 0; j < k; ++j) w[j] /= chosen;
    }
}

void moe_router_counts(double* counts, const int32_t* expert, int64_t N, int64_t k, int64_t E) {
    for (int64_t i = 0; i < N * k; ++i) {
        WEFT_CHECK(expert[i] >= 0 && expert[i] < E,
                   "moe_router_counts: slot {} routes to expert {}, expected 0..{}", i, expert[i],
                   E - 1);
        counts[expert[i]] += 1;
    }
}

MoeRouterLoss moe_router_loss(const float* probs, const float* lse, const double* counts, int64_t N,
                              int64_t E, MoeLossCoefs coef, double scale) {
    MoeRouterLoss out;
    if (coef.aux != 0) {
        WEFT_CHECK(counts, "moe_router_loss: the load-balance loss needs the batch's counts");
        const std::vector<double> f = fractions(counts, E);
        double sum = 0;
        for (int64_t t = 0; t < N; ++t)
            for (int64_t e = 0; e < E; ++e) sum += f[size_t(e)] * probs[t * E + e];
        out.aux = coef.aux * double(E) * scale * sum;
    }
    if (coef.z != 0) {
        double sum = 0;
        for (int64_t t = 0; t < N; ++t) sum += double(lse[t]) * lse[t];
        out.z = coef.z * scale * sum;
    }
    return out;
}

void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* expert, const double* counts, int64_t N, int64_t E,
                         int64_t k, bool renormalize, MoeLossCoefs coef, double scale) {
    WEFT_PROFILE("moe_router_bwd");
    check_shape("moe_router_backward", N, E, k);
    WEFT_CHECK(coef.aux == 0 || counts,
               "moe_router_backward: the load-balance loss needs the batch's counts");
    // ∂aux/∂p[t, e] is the same for every token: coef · E · f_e · scale.
    std::vector<double> daux(size_t(E), 0.0);
    if (coef.aux != 0) {
        const std::vector<double> f = fractions(counts, E);
        for (int64_t e = 0; e < E; ++e)
            daux[size_t(e)] = coef.aux * double(E) * f[size_t(e)] * scale;
    }
#pragma omp parallel for schedule(static) if (N * E >= kMinParallel)
    for (int64_t t = 0; t < N; ++t) {
        const float* p = probs + t * E;
        float* d = dlogits + t * E;
        // d holds ∂loss/∂p first, then becomes ∂loss/∂logits.
        for (int64_t e = 0; e < E; ++e) d[e] = float(daux[size_t(e)]);
        if (dweight) {
            const int32_t* ex = expert + t * k;
            const float* dw = dweight + t * k;
            if (renormalize) {
                // w_j = p_j / S, S = Σ_m p_m: ∂/∂p_j = (dw_j - Σ_m dw_m w_m) / S.
                double S = 0, dot = 0;
                for (int64_t j = 0; j < k; ++j) S += p[ex[j]];
                for (int64_t j = 0; j < k; ++j) dot += double(dw[j]) * p[ex[j]] / S;
                for (int64_t j = 0; j < k; ++j) d[ex[j]] += float((dw[j] - dot) / S);
            } else {
                for (int64_t j = 0; j < k; ++j) d[ex[j]] += dw[j];
            }
        }
        // Softmax: ∂/∂x_e = p_e (g_e - Σ_f p_f g_f); the z-loss adds 2 coef scale lse p_e.
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += double(p[e]) * d[e];
        const double dz = coef.z != 0 ? 2.0 * coef.z * scale * lse[t] : 0.0;
        for (int64_t e = 0; e < E; ++e) d[e] = float(p[e] * (d[e] - dot + dz));
    }
}

}  // namespace weft::kernels
