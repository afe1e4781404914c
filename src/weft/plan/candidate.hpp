#pragma once
// What the planner evaluates: a workload (model, batch, sequence, precision) and a candidate
// layout (weft::Layout, which holds the recomputation level, plus the micro-batch size).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/layout.hpp"
#include "weft/parallel/pipeline/partition.hpp"
#include "weft/plan/documents.hpp"
#include "weft/plan/models.hpp"

namespace weft::plan {

// Bytes per parameter of each model-state kind, and per activation element.
//   bf16/fp16 (mixed precision, Rajbhandari et al. 2020 Sec. 3.1): 2 params + 2 grads + K=12
//     optimizer (fp32 master copy 4, momentum 4, variance 4).
//   fp32 (this engine on CPU): 4 params + 4 grads + 8 optimizer (AdamW's two fp32 moments; the
//     parameters are already fp32, so there is no master copy).
// `update` is the memory traffic of one optimizer step per parameter (read and write of every
// state, the gradient norm, zeroing the gradients), for the memory-bound time of the step.
struct Precision {
    std::string name;
    double param = 0, grad = 0, optimizer = 0, activation = 0, update = 0;
    // Bytes per gradient element that data-parallel reductions (and the tied embedding's
    // exchange) put on the wire: `grad` unless --grad-reduce-dtype says otherwise. The engine's
    // bf16 reduction (an all-to-all of bf16 blocks, fp32 sums, then ZeRO 0-1 an all-gather of
    // the rounded sums) moves exactly what a ring all-reduce or reduce-scatter of 2-byte
    // elements would, so it is priced as one.
    double grad_wire = 0;
};
Precision precision(const std::string& dtype);  // bf16 | fp16 | fp32
// Megatron-Core's bytes for a mixed-precision run (its distributed optimizer's table,
// docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html: "float16 param,
// fp32 grads: 18 bytes, distributed 6 + 12/d"): 16-bit weights, fp32 main gradients (Megatron
// accumulates and all-reduces bf16 runs' gradients in fp32), 12 bytes of fp32 master weights and
// Adam moments. fp8 is Transformer Engine's recipe: the same state (bf16 weights, their fp8
// copies made per step and not kept), products at the fp8 peak, everything else in bf16.
Precision megatron_precision(const std::string& dtype);  // bf16 | fp16 | fp8
// This engine's bytes (the engine memory profile): fp32 weights, gradients and moments, and an
// fp32 update, for fp32 and bf16 alike (docs/planner.md); `activation` is what tensor- and
// pipeline-parallel messages carry: 2 bytes under bf16 (bf16 on the wire), else 4. Gradients
// are reduced in fp32, the engine's default (--grad-reduce-dtype fp32; see with_grad_reduce).
// fp16 is an error.
Precision engine_precision(const std::string& dtype);
// `p` with gradients reduced in `dtype` (fp32 | bf16, the engine's --grad-reduce-dtype).
Precision with_grad_reduce(Precision p, const std::string& dtype);
// `p` with the state of `optimizer` (optim/registry.hpp: its bytes per parameter; none for
// gradients when it takes none) in place of AdamW's: the engine's fp32 parameters need no master
// copy, mixed precision keeps its 4-byte one.
Precision with_optimizer(Precision p, const std::string& optimizer);

enum class MemoryProfile { engine, korthikanti };

// How attention keeps what its backward needs (korthikanti profile). flash: FlashAttention (Dao et
// al. 2022), no s x s scores, only the fp32 log-sum-exp of each row; what every GPU framework
// runs today. scores: the softmax output and dropout of Korthikanti et al.'s Table 2 (2021
// Megatron, unfused attention).
enum class AttentionKind { flash, scores };
AttentionKind parse_attention(std::string_view name);
std::string_view attention_name(AttentionKind a);

// What a gated MLP (SwiGLU) keeps for its backward (korthikanti profile). kept: gate, up and
// their product, the down projection's input (Megatron-Core, Transformer Engine, autograd).
// fused: gate and up only; the backward kernel that reads them for their gradients recomputes
// the product for down's (xformers' fused SwiGLU, Meta 2022-2025: `silu_bw_fused` returns it),
// as FlashAttention recomputes its scores.
enum class GluBackward { kept, fused };
GluBackward parse_glu_backward(std::string_view name);
std::string_view glu_backward_name(GluBackward g);
std::string_view profile_name(MemoryProfile p);
MemoryProfile parse_profile(std::string_view name);

struct Workload {
    NamedModel model;
    int64_t global_batch = 0, seq_len = 0;
    Precision prec;
    MemoryProfile profile = MemoryProfile::korthikanti;
    AttentionKind attention = AttentionKind::flash;
    GluBackward glu = GluBackward::kept;
    bool tp_overlap = false;  // tensor-parallel collectives overlapped with the products
    // Gradient reduction overlapped with backward (Megatron-Core's --overlap-grad-reduce,
    // DeepSpeed's overlap_comm, FSDP); without, it runs after the last backward (2021 Megatron).
    bool dp_overlap = true;
    // Each pipeline chunk's output, once sent to the next rank, kept until the chunk's backward
    // (torch.distributed.pipelining's forward cache holds it; korthikanti profile). By default it
    // is freed after the send, as Megatron-LM (deallocate_pipeline_outputs) and Llama 3 (Dubey
    // et al. 2024, Sec. 3.3.2) do. The engine always keeps it (Activations::resid), and its
    // profile counts it.
    bool pp_outputs_kept = false;
    double bucket_mb = 25;  // gradient bucket (the engine's --bucket-mb)
    // Mixture of experts, expert parallelism: the rows the busiest ep rank's experts receive per
    // MoE layer, over the balanced k x tokens (--moe-imbalance; 0: the model's capacity factor
    // when it drops tokens, else 1, a balanced dropless router).
    double moe_imbalance = 0;
    // --offload optimizer (engine profile): the moments live on disk, streamed in groups of this
    // many floats through a pool in memory; 0: in memory.
    int64_t offload_group_floats = 0;
    // ... with weft train's bf16 working copy: the fp32 master weights on disk too, the weights
    // and gradients in memory as parallel::WorkingCopy stores them.
    bool bf16_working_copy = false;
    // --offload optimizer+params: the working copy (bf16 with bf16_working_copy, else fp32) in
    // files too, memory holding parallel::WorkingCopy::resident_bytes of it.
    bool params_offloaded = false;
    // The optimizer whose state the engine profile counts (optim/registry.hpp).
    std::string optimizer = "adamw";
    // Packed documents (--doc-lengths): attention priced by the documents' own sum of n^2, at
    // the busiest dp rank's share, static or balanced (documents.hpp); none: windows of T^2.
    std::optional<DocumentSource> documents;
};

// Fails, naming the value, when `w.glu` cannot describe the run: fused needs the korthikanti
// profile, a family with a gated MLP, and 16-bit products (under fp8, Transformer Engine's down
// projection keeps its own copy of the product).
void check_glu_backward(const Workload& w);

// The imbalance factor `w` prices (Workload::moe_imbalance, its default resolved).
double moe_imbalance(const Workload& w);

struct Candidate {
    Layout layout;
    int64_t micro_batch = 1;
    // Layers of each pipeline chunk, "7,8,...,8,7" (the engine's --pp-layers); empty: even. A
    // stage holding the embedding or the head is usually given a layer less, the layer's time
    // going to the embedding or the head (Llama 3's 126 layers over 16 stages).
    std::string pp_layers;
    // Context parallelism by all-gathering K and V before attention (Llama 3's 128K stage,
    // Dubey et al. 2024, Sec. 3.3.2) instead of cp_kind's ring or all-to-alls. The planner's
    // alone: the engine runs ring, Ulysses and their hybrid.
    bool cp_all_gather = false;

    int64_t micro_batches(const Workload& w) const {
        return w.global_batch / (int64_t(layout.dp) * micro_batch);
    }
    // "dp=8 tp=8 pp=16 cp=1 zero=1 sp mb=1 1f1b recompute=none" (" ep=2" after dp when ep > 1)
    std::string describe() const;
};

// Parameters one device holds whole (before ZeRO sharding) on pipeline rank `stage`: its layers
// split by tensor parallelism (Megatron: QKV, attention projection and MLP matrices and the
// column-parallel biases split, LayerNorms and row-parallel biases replicated), the embeddings
// on the first stage, the final LayerNorm on the last, and a copy of the tied word embeddings
// on the last stage when pp > 1 (Megatron keeps one there and all-reduces its gradient).
double stage_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                        const std::string& pp_layers = "");
// Parameters of one unit (0 the embedding, 1 the first block) as one tp rank stores it.
double unit_parameters(const model::ModelConfig& cfg, int tp, int unit);
// Of stage_parameters, those in expert tensors (ParamSpec::expert) at ep = 1: expert
// parallelism divides these by ep, the rest stay whole on every rank.
double stage_expert_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                               const std::string& pp_layers = "");
// Layers of each of the pp x vpp chunks (pp_layers, or an even split).
std::vector<int> chunk_layers(const model::ModelConfig& cfg, const Layout& l,
                              const std::string& pp_layers);
// The planner's partition of the layers: the engine's, but the first and last chunk may hold no
// layer (the embedding alone, the head alone: Llama 3 405B's pipeline), which the GPU profile
// prices and check_candidate refuses under the engine profile.
pipeline::Partition plan_partition(const model::ModelConfig& cfg, const Layout& l,
                                   const std::string& pp_layers);
int64_t tp_padded_vocab(const model::ModelConfig& cfg, int tp);  // padded to 128 * tp

}  // namespace weft::plan
