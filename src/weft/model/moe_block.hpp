#pragma once
// The mixture-of-experts MLP of a Llama layer (Mixtral's block_sparse_moe; OLMoE's, Qwen-MoE's
// without shared experts): a router [E, C] picks k of E SwiGLU experts for each token
// (kernels/moe_router.hpp), the token rows are grouped by expert (kernels/moe_dispatch.hpp), each
// expert multiplies its rows (gate and up [F, C], down [C, F]; one oneDNN product per expert and
// projection), and the outputs are combined with the routing weights in fp32.
//
// Each projection of all experts is one [E, ...] tensor, expert e's matrix its e-th block, so a
// contiguous range of experts (what expert parallelism gives a rank) is a contiguous slice.
//
// Losses: the router's load-balance and z-losses are added to the training loss with their
// coefficients once per layer (as Megatron-LM does: coef x loss per layer, added to the mean LM
// loss). Their gradient needs the training loss's scale (Activations::loss_scale) and, for the
// load balance, the routing counts of the whole micro-batch over the ranks that split it, which a
// MoeComm sums.
#include <cstdint>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/kernels/moe_dispatch.hpp"
#include "weft/model/config.hpp"
#include "weft/model/moe_comm.hpp"

namespace weft::model {

class RowProducts;

struct MoeWeights {
    float *router, *w1, *w2, *w3;  // router [E, C]; w1 (gate), w3 (up) [E, F, C]; w2 [E, C, F]
    // Shared experts (n_shared_experts x F = SF wide; null without): [gate; up] [2 SF, C] and
    // down [C, SF].
    float* shared_gu = nullptr;
    float* shared_down = nullptr;
};

// What one layer keeps from forward for backward, for N tokens (Nk = N x k slots):
//   probs [N, E], lse [N], weight [N, k], expert [N, k] (int32), the dispatch plan,
//   gu [Nk, 2F] ([gate | up] per grouped row), act [Nk, F], y [Nk, C] (each expert's output),
//   and with shared experts shared_gu [N, 2 SF], shared_act [N, SF].
struct MoeLayerActs {
    MoeLayerActs() = default;
    MoeLayerActs(const ModelConfig& cfg, int64_t N);
    // Floats of one layer's buffers (int32 and the plan counted as one float per element).
    static int64_t floats(const ModelConfig& cfg, int64_t N);

    Buffer probs, lse, weight, gu, act, y, shared_gu, shared_act;
    std::vector<int32_t> expert;
    kernels::MoePlan plan;
    // Expert parallelism (ep > 1): rows sent to each (rank, local expert) and received from each
    // (source rank, local expert), [ep x E/ep] each; the rows received (xr [Rr, C]) and the
    // experts' gu, act over them, in (source rank, local expert) order. Sized per forward.
    std::vector<int64_t> ep_send, ep_recv;
    std::vector<float> xr, gu_r, act_r;
};

// Aux-loss-free balancing (DeepSeek-V3, Wang et al. 2024), after each step: every expert's
// selection bias moves by `rate` towards balance, bias[e] += rate x sign(mean load - load[e]),
// load[e] the slots the step's whole batch sent to e (summed over micro-batches and ranks, so
// every rank moves alike) and the mean over the E experts. An expert at the mean keeps its bias.
void moe_update_router_bias(float* bias, const double* load, int64_t E, double rate);

class MoeMlp {
  public:
    explicit MoeMlp(const ModelConfig& cfg);
    // Expert parallelism: the weights given to forward and backward are then this rank's
    // E/ep experts (ParamSpec::expert), and rows travel to and from their experts' ranks through
    // `comm` (one row exchange each way per forward and per backward, after one count exchange
    // in forward). Null: every expert here.
    void set_expert_comm(ExpertComm* comm);
    // Scratch the layer holds for N tokens (router logits, grouped inputs and gradients).
    static int64_t scratch_floats(const ModelConfig& cfg, int64_t N);
    // Floats of the copies one layer's deferred W waits on, for N tokens: the N k rows' output
    // and [gate | up] gradients, the router logits' gradient, and the shared experts' output and
    // [gate | up] gradients. With expert parallelism the rows are those received, N k on average.
    static int64_t deferred_floats(const ModelConfig& cfg, int64_t N);
    // Floats forward_rows allocates for N rows (its int32 expert ids counted as floats).
    static int64_t row_floats(const ModelConfig& cfg, int64_t N);

    // `selection_bias` [E] (null: none): the layer's aux-loss-free balancing bias, added to the
    // router's probabilities for the top-k choice only (kernels::moe_router_forward).
    // out[N, C] = residual + MoE(x). `counts` [E] are the micro-batch's routing counts over the
    // ranks: computed (and summed through `comm` when training) unless `counts_known` (the
    // re-run of a recomputed layer). With loss_scale > 0 (training) the losses and routing go
    // into `stats` (layer `layer`).
    void forward(MoeLayerActs& a, std::vector<double>& counts, float* out, const float* x,
                 const float* residual, const MoeWeights& p, int64_t N, double loss_scale,
                 bool counts_known, MoeComm* comm, MoeStats* stats, int layer,
                 const float* selection_bias = nullptr);
    // Serving and generation (Model::forward_rows): out[N, C] = residual + MoE(x), each row
    // routed on its own with no capacity limit (a full expert would drop rows depending on the
    // others in the batch), every product through `mm`, the router's in fp32: a row's bits do
    // not depend on the other rows. Every expert on this rank (no expert parallelism).
    void forward_rows(float* out, const float* x, const float* residual, const MoeWeights& p,
                      int64_t N, RowProducts& mm, const float* selection_bias = nullptr);
    // dx[N, C] (overwritten) from dout[N, C], the gradient of forward's output; the weights'
    // gradients are added to g, or under a DeferWeightGrads scope queued for its W
    // (weight_grads.hpp) with copies of the gradients they read: bit for bit the same. The
    // router's losses' gradients flow back with loss_scale.
    void backward(float* dx, const float* dout, const float* x, const MoeLayerActs& a,
                  const std::vector<double>& counts, const MoeWeights& p, const MoeWeights& g,
                  int64_t N, double loss_scale);

  private:
    void ensure_scratch(int64_t N);
    // One product block: `n` rows from `r0` of the expert-side buffers, for local expert `local`.
    struct Block {
        int64_t local, r0, n;
    };
    // The blocks of this forward: per expert of the plan (ep 1), or per (source rank, local
    // expert) of the rows received (ep > 1), after exchanging the counts and the rows.
    std::vector<Block> dispatch_forward(MoeLayerActs& a, int64_t* rows);
    std::vector<Block> blocks_of(const MoeLayerActs& a) const;
    // The weights' gradients of a backward, from the gradients it computed: the experts' from the
    // rows' output gradients dy [Rx, C], [gate | up] gradients dgu [Rx, 2F] and grouped inputs
    // xe [Rx, C]; the shared experts' and the router's from the block's output gradient
    // dout [N, C], the shared [gate | up] gradient sdgu [N, 2 SF] and dlogits [N, E].
    void expert_weight_grads(const MoeLayerActs& a, const float* dy, const float* dgu,
                             const float* xe, const MoeWeights& g) const;
    void token_weight_grads(const float* x, const MoeLayerActs& a, const float* dout,
                            const float* sdgu, const float* dlogits, const MoeWeights& g,
                            int64_t N) const;
    // Rows per rank, to send and to receive, from the (rank, local expert) counts.
    void rank_rows(const MoeLayerActs& a);

    ModelConfig cfg_;
    int64_t E_, k_, F_, C_, SF_;
    int64_t scratch_n_ = 0;
    // logits_ [N, E] (then dlogits), xp_ [Nk, C] (grouped input, then its gradient),
    // dyp_ [Nk, C], dact_ [Nk, F], dgu_ [Nk, 2F], dweight_ [N, k]; shared experts: sdact_ [N, SF],
    // sdgu_ [N, 2 SF].
    Buffer logits_, xp_, dyp_, dact_, dgu_, dweight_, sdact_, sdgu_;
    ExpertComm* ep_comm_ = nullptr;
    int64_t EL_;  // experts on this rank
    // ep > 1: rows per rank sent and received; expert-side scratch in received-row order:
    // yr_ (outputs, then input gradients), dyr_, dact_r_, dgu_r_.
    std::vector<int64_t> send_rows_, recv_rows_;
    std::vector<float> yr_, dyr_, dact_r_, dgu_r_;
};

}  // namespace weft::model
