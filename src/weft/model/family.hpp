#pragma once
// A model family (GPT-2, Llama, ...) as the engine and the planner see it: one value of plain
// functions, registered once in family.cpp. Everything a layout needs to know about a model
// comes from here or from the Model it makes, so adding a family means adding its files and one
// line in the registry, not editing the trainer, ZeRO, checkpoints or the planner.
//
// The counts have one source each: parameters come from `declare` (build_param_layout sums
// them), activation and scratch floats from the functions the model's own allocations use, and
// the per-layer matrix products (for the planner's time model) from `layer_linears`.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/ckpt/hf_llama_config.hpp"
#include "weft/model/config.hpp"
#include "weft/model/model.hpp"
#include "weft/model/params.hpp"
#include "weft/model/tp_comm.hpp"

namespace weft::model {

// One matrix product of a block, per token: [in] -> [out]. Column-parallel products split `out`
// over tensor parallelism, row-parallel ones split `in` (Megatron-LM).
struct LinearShape {
    const char* name;
    int64_t out, in;
    bool column_parallel;
    // Under --dtype bf16 the family keeps this product's input as bf16 (LayerSpan::bf16).
    bool bf16_input = false;
    // ... and hands its backward the output gradient already rounded to bf16
    // (kernels::matmul_backward_bf16_dout), so that no copy of it is rounded for the products.
    bool bf16_dout = false;
};

// One block's stored activations per token in Korthikanti et al. 2022's accounting (their
// Table 2, in bytes of 16-bit activations, for the planner's GPU memory profile), generalised
// past GPT: `replicated` bytes stay whole under tensor parallelism (the norms' inputs, the
// column-parallel inputs, dropout masks), `split` bytes divide by tp, and `scores` times the
// sequence length is the attention scores' bytes (softmax output, and with dropout its mask and
// output). Sequence parallelism divides the first two by tp as well.
struct ActivationTerms {
    double replicated, split, scores;
    // Of replicated and split, the inputs of the linear layers that Transformer Engine keeps as
    // fp8 under fp8 training (one byte instead of two): those not also kept by another op.
    double fp8_replicated, fp8_split;
    // Bytes per token the embedding keeps per micro-batch on the first chunk: its dropout mask
    // (one byte an element, their Sec. 4.3), replicated like the layer's; 0 without dropout.
    double embedding;
    // Of split, a gated MLP's product act(gate)·up (the down projection's input), which a fused
    // gated-MLP backward recomputes from gate and up rather than keeping it (plan::GluBackward);
    // 0 for an MLP without a gate.
    double glu_product;
};

// A tensor's name and orientation in Hugging Face's files.
struct HfTensorName {
    std::string name;
    bool transposed = false;  // stored [in, out] there (GPT-2's Conv1D)
    // Stored there as one tensor per index of the first dimension (Mixtral's experts), each
    // named by `name` with the index in place of its "{}".
    bool per_index = false;
};

// A Hugging Face model a family reads: config.json's model_type and the one architectures class
// that goes with it (the causal-LM head; another head has other tensors).
struct HfModelType {
    std::string model_type, architecture;
};

struct Family {
    std::string name;
    // The Hugging Face models this family reads: the one registry of them (model/family.cpp
    // resolves a directory's config.json against every family's list).
    std::vector<HfModelType> hf_model_types;
    // Preset names and their configs.
    std::vector<std::pair<std::string, ModelConfig>> presets;

    // Family-specific checks (ModelConfig::validate does the shared ones first).
    void (*validate)(const ModelConfig& cfg, const std::string& where);
    // The parameter tensors, unit by unit (params.hpp: unit 0 the embedding, 1..L the blocks,
    // L+1 the final norm and, when untied, the output head).
    void (*declare)(const ModelConfig& cfg, ParamDeclarer& d);
    // The model over a shard; `tp` is the tensor-parallel group (null at tp = 1).
    std::unique_ptr<Model> (*make)(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp,
                                   bool sequence_parallel);
    // Floats of the Activations the model builds for (B, T, span), exactly what it allocates.
    int64_t (*activation_floats)(const ModelConfig& cfg, int64_t B, int64_t T,
                                 const LayerSpan& span);
    // Floats of scratch the model holds (shared by all micro-batches) at tensor-parallel degree
    // tp, not counting the head's logits (kernels::classifier_*scratch_floats).
    int64_t (*scratch_floats)(const ModelConfig& cfg, int64_t B, int64_t T, int tp,
                              bool sequence_parallel);
    // Floats Model::forward_rows allocates at once for a batch of `rows` rows at tp 1 (the logits
    // and the KV pool are its caller's): what a frozen teacher's forward adds to a training run.
    int64_t (*row_floats)(const ModelConfig& cfg, int64_t rows);
    // The matrix products of one block, and its activations as Korthikanti et al. count them
    // (planner).
    std::vector<LinearShape> (*layer_linears)(const ModelConfig& cfg);
    ActivationTerms (*korthikanti_terms)(const ModelConfig& cfg);

    // Hugging Face directories: config.json in and out, and each tensor's name there.
    ModelConfig (*read_hf_config)(const std::filesystem::path& dir);
    void (*write_hf_config)(const std::filesystem::path& dir, const ModelConfig& cfg);
    HfTensorName (*hf_tensor)(const ModelConfig& cfg, const ParamSpec& p);
    // Name endings of the tensors in Hugging Face files that transformers drops on load (buffers
    // it recomputes, a tied head's copy): weft drops them too rather than refusing the file.
    std::vector<std::string> hf_ignored;
};

// Every registered family, and lookups that fail naming the value and the known ones.
const std::vector<const Family*>& families();
const Family& family(const std::string& name);
inline const Family& family_of(const ModelConfig& cfg) {
    return family(cfg.family);
}
// The family that reads a Hugging Face directory whose config.json (`file`) says `id`: by its
// model_type, or by its architectures class when model_type is absent; the two must agree.
// Known architectures weft does not compute are refused with the reason, others with the list
// of those it reads.
const Family& family_for_hf(const ckpt::HfModelId& id, const std::string& file);

// Floats of the Activations a span keeps per micro-batch (the family's count) and, with
// span.deferred_weights, the output-gradient copies its blocks' W's wait on: the one count of
// activations the trainer's estimate and the planner read. The copies are each deferred
// product's output gradient (its rows x its tp shard's columns; bf16 where the product takes a
// bf16 one under bf16), and an MoE layer's own (MoeMlp::deferred_floats).
int64_t activation_floats(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span);

// The model for `cfg` (its family's make).
std::unique_ptr<Model> make_model(const ModelConfig& cfg, const ModelShard& shard = {},
                                  TpComm* tp = nullptr, bool sequence_parallel = false);

// Units a pipeline chunk over `span` reads: its layers' blocks, the embedding (unit 0) when it
// starts at layer 0, and with the head the final unit plus, for a tied head, the embedding.
std::vector<int> units_of_span(const ModelConfig& cfg, const LayerSpan& span);

}  // namespace weft::model
