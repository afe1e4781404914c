#pragma once
// Memory of one device, by kind. Two profiles (docs/planner.md):
//   korthikanti  GPU mixed precision: model states of the ZeRO paper, activations of Korthikanti
//                et al. 2022, buffers of Megatron/DeepSpeed.
//   engine       this engine on CPU, fp32 or bf16: model state from the engine's own layout and
//                parallel::zero_state_bytes (what DataParallel allocates and train::memory_estimate
//                reports) for every dp x ZeRO x tp x pp x cp layout (ring, Ulysses, hybrid), and
//                with experts, each rank's E/ep experts sharded by ZeRO over the
//                expert-data-parallel group (dp/ep x cp ranks) and the rest over dp x cp; fp32
//                weights, gradients, AdamW moments and activations whatever --dtype is (bf16 rounds
//                only the products' operands, into per-thread scratch neither side counts:
//                docs/planner.md).
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/plan/candidate.hpp"
#include "weft/plan/cluster.hpp"

namespace weft::plan {

struct MemoryBreakdown {
    double weights = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0, runtime = 0;
    // Optimizer state on disk (--offload optimizer), not in total(): `optimizer` is then the
    // pool it streams through.
    double offloaded = 0;
    // Of it, the working copy's weights and gradients and the master (optimizer+params).
    double offloaded_params = 0;
    double total() const { return weights + grads + optimizer + activations + buffers + runtime; }
};

// Activation bytes of one transformer layer for one micro-batch of b sequences, in the exact forms
// of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
// Table 2, with s the sequence, h the width, a the heads, t the tensor-parallel degree (for
// GPT; other families give their own terms, model::ActivationTerms):
//   no recomputation, tensor parallel      sbh (10 + 24/t + 5as/(ht))
//   ... with sequence parallel             sbh (34/t + 5as/(ht))
//   selective recomputation                sbh (10 + 24/t), with sequence parallel sbh (34/t)
//   full recomputation                     2sbh
// (t = 1 gives the unparallelised sbh(34 + 5as/h) of Sec. 4.1.) The paper counts 16-bit
// activations and 1-byte dropout masks; for other element sizes the whole is scaled by
// bytes/2. With context parallelism each rank keeps s/cp of the tokens; its attention scores
// span the whole sequence, so the 5as/h term becomes 5a(s/cp)s b/t.
// With `attention` flash (FlashAttention, the GPU default) the score term is gone whatever the
// recomputation, and flash_lse_bytes is kept instead: no recomputation then keeps what selective
// recomputation keeps, plus the log-sum-exp.
double korthikanti_layer_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp,
                               int cp, bool sp, Recompute r, double activation_bytes,
                               AttentionKind attention = AttentionKind::scores);
// FlashAttention's saved statistics (Dao et al. 2022, Alg. 2: the log-sum-exp L of each query
// row and head, fp32): 4 bytes x heads/t x s/cp x b per layer. 0 with full recomputation (the
// layer's input alone is kept).
double flash_lse_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                       Recompute r);

// fp8 training (Transformer Engine): the linear layers keep their inputs as fp8, one byte where
// korthikanti_layer_bytes counts two; the bytes per layer and micro-batch this saves (the
// family's ActivationTerms::fp8_*; 0 with full recomputation).
double fp8_saved_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                       bool sp, Recompute r);

// A fused gated-MLP backward (GluBackward::fused): the product act(gate)·up it does not keep,
// bytes per layer and micro-batch at `activation_bytes` an element (0 with full recomputation,
// and for a family without a gate).
double fused_glu_saved_bytes(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, int cp,
                             Recompute r, double activation_bytes);

// Expert parameters one tp rank of pipeline rank `stage` holds on a GPU (at ep = 1): the
// experts split over tp as Megatron-Core's expert tensor parallelism does at its default degree
// (tp), 1/t of each expert's gate, up and down. The engine's layout keeps them whole on every tp
// rank (stage_expert_parameters), and refuses tp with experts.
double gpu_expert_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                             const std::string& pp_layers);

// Model states of one device (weights, gradients, optimizer) for the korthikanti profile: the
// ZeRO paper's (2 + 2 + K)Psi with the bytes of `w.prec` (Megatron-Core: 2 + 4 + 12), cut over
// the gradient group dp x cp by ZeRO stage (1: Megatron's distributed optimizer, 6 + 12/d), the
// experts' share over their own group. `psi` and `psi_e` are the stage's parameters and, of
// them, the expert tensors' (at ep = 1).
MemoryBreakdown gpu_model_states(const Workload& w, const Layout& l, double psi, double psi_e);

// Floats one more layer adds to the activations the engine allocates (the model family's
// activation_floats, the one source), under tp and sequence parallelism; with full
// recomputation, only the layer's input.
double engine_layer_floats(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, bool sp,
                           Recompute r);
// Floats the head adds (final norm, its gradient and statistics, per-token losses).
double engine_head_floats(const model::ModelConfig& cfg, int64_t seq, int64_t b, int tp, bool sp);

// Mixture of experts with ep > 1: the floats one MoE layer keeps, per micro-batch of `tokens`,
// for the rows its experts receive from the ep group (the received inputs [R, C], the experts'
// gate|up [R, 2F] and product [R, F]; R = imbalance x tokens x k, the busiest rank's share), beside
// what the family counts for the k rows a token sends. 0 at ep 1, where no row travels.
// On GPUs (`tp` > 1) each tp rank holds 1/t of the experts' gate|up and product columns.
double moe_received_floats(const model::ModelConfig& cfg, int64_t tokens, int ep, double imbalance,
                           int tp = 1);

// Bytes a pipeline rank keeps per (micro-batch, chunk) in flight, on average over its chunks,
// for the outputs it has sent and not freed (Workload::pp_outputs_kept): one [s/cp x b, h]
// boundary (/t with sequence parallelism) for each chunk whose successor is on another rank.
// 0 when the outputs are freed after the send or there is no pipeline.
double kept_output_bytes(const Workload& w, const Candidate& k, int stage);

// The micro-batches of each chunk of pipeline rank `rank` (in pipeline::rank_chunks order) that
// its actions hold at the moment they hold the most layers (`layers`: each chunk's, of the whole
// model; on a tie, the most chunks). A forward holds a chunk's activations until its backward
// (under the zero-bubble kinds, its weight backward) frees them, as the simulator counts them;
// so a stage whose chunks differ is counted by the chunks it really holds, not by its average.
std::vector<double> held_at_peak(const pipeline::Schedule& s, int rank,
                                 const std::vector<int>& layers);

// One device of pipeline rank `stage` whose schedule holds `held[i]` micro-batches of its i-th
// chunk at once (held_at_peak). The engine profile takes their sum, as the engine's estimate.
MemoryBreakdown stage_memory(const Workload& w, const Cluster& c, const Candidate& k, int stage,
                             const std::vector<double>& held);
// The same with at most `in_flight` (micro-batch, chunk) activations at once, as many of each of
// the stage's chunks (the pipeline simulator's count).
MemoryBreakdown stage_memory(const Workload& w, const Cluster& c, const Candidate& k, int stage,
                             int in_flight);

// What one rank of pipeline rank `stage` keeps in its offload files (engine profile, with
// Workload::offload_group_floats set), bytes, from the counts stage_memory takes: the
// optimizer's state (its own count, optim/registry), the fp32 master of what the rank updates
// (with a working copy), the working copy's stored weights (as many again of gradients; with
// --offload optimizer+params) and the embedding unit's fp32 record within them.
struct OffloadedState {
    double optimizer = 0, master = 0, copy = 0, embedding = 0;
};
OffloadedState offloaded_state(const Workload& w, const Candidate& k, int stage);

}  // namespace weft::plan
