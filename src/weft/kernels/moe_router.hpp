#pragma once
// The router of a mixture-of-experts layer, in fp32 whatever the matrix products' precision (as
// Megatron-LM and Hugging Face keep it): a softmax over the E experts' logits of each token, the
// top k of it, and the two auxiliary losses that keep the routing healthy.
//
// - Top-k: the k largest probabilities, largest first, ties going to the lower expert index (a
//   fixed rule, so that every layout routes alike). Mixtral renormalises the chosen k to sum to 1;
//   Qwen-MoE and OLMoE use the raw probabilities.
// - Load-balance loss (Switch Transformer, GShard): E · Σ_e f_e · P_e, f_e the fraction of the
//   batch's token-slots (tokens × k) routed to expert e and P_e the mean probability of e over
//   the batch's tokens. It is minimal (1) when routing is uniform. f is piecewise constant in the
//   logits and gets no gradient.
// - Router z-loss (ST-MoE): the mean over tokens of logsumexp(logits)², keeping the logits small.
//
// The batch a loss is a mean over may span several calls (micro-batches) and several ranks: the
// caller sums the counts of the whole batch (moe_router_counts on each part, then a sum over the
// ranks) before the losses, and passes `scale` = 1 / (tokens of the batch), so each call returns
// and differentiates its exact share. No MPI here.
#include <cstdint>

namespace weft::kernels {

// probs[N, E] = softmax(logits[N, E]) per row; lse[N] = logsumexp of each row; expert[N, k] the
// chosen experts, largest probability first; weight[N, k] their probabilities, divided by their
// sum when `renormalize`. 1 <= k <= E.
//
// `selection_bias` [E] (null: none) is aux-loss-free balancing (DeepSeek-V3, Wang et al. 2024):
// the k experts are those of the largest probs + bias, while the weights stay the unbiased
// probabilities. The choice is not differentiated, so backward needs no bias.
void moe_router_forward(float* probs, float* lse, int32_t* expert, float* weight,
                        const float* logits, int64_t N, int64_t E, int64_t k, bool renormalize,
                        const float* selection_bias = nullptr);

// counts[e] += how many of the N * k slots of expert[N, k] chose e (counts[E] is the caller's, so
// parts of a batch add up).
void moe_router_counts(double* counts, const int32_t* expert, int64_t N, int64_t k, int64_t E);

// Coefficients of the two losses; 0 turns one off.
struct MoeLossCoefs {
    double aux = 0;  // load balance
    double z = 0;    // router z-loss
};

// This call's share of each loss, coefficients applied:
//   aux = coef.aux · E · Σ_e f_e · scale · Σ_t probs[t, e],   f_e = counts[e] / Σ_e counts
//   z   = coef.z · scale · Σ_t lse[t]²
// counts (of the whole batch) may be null when coef.aux is 0.
struct MoeRouterLoss {
    double aux = 0, z = 0;
};
MoeRouterLoss moe_router_loss(const float* probs, const float* lse, const double* counts, int64_t N,
                              int64_t E, MoeLossCoefs coef, double scale);

// dlogits[N, E] (overwritten): the gradient of Σ dweight · weight (dweight[N, k] the gradient of
// the training loss with respect to the chosen weights; null for none) plus the two losses of
// moe_router_loss with the same counts, coefficients and scale, through the top-k (and its
// renormalisation) and the softmax.
void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* expert, const double* counts, int64_t N, int64_t E,
                         int64_t k, bool renormalize, MoeLossCoefs coef, double scale);

}  // namespace weft::kernels
