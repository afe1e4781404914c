#pragma once
// The parameters of a GPT-2 model as logical tensors laid out in one flat buffer.
//
// Order: unit 0 holds the embeddings (wte, wpe), units 1..L one transformer block each, unit L+1
// the final LayerNorm. A unit's tensors are contiguous, so a pipeline stage owns a range of
// units, a ZeRO-3 gather fetches one unit, and a gradient bucket is a range of the buffer. Each
// tensor starts on a 64-byte boundary; the few padding floats stay zero.
//
// Names are Hugging Face's GPT-2 names without the "transformer." prefix. Matrices are stored
// [out, in] (torch.nn.Linear); Hugging Face's Conv1D [in, out] is transposed at import/export.
#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/config.hpp"

namespace weft::model {

enum class Init { normal, zeros, ones };

struct ParamSpec {
    std::string name;
    std::vector<int64_t> shape;  // logical shape (vocabulary unpadded)
    // Rows and row length held in the buffer: this rank's shard of the logical tensor, the
    // embedding's rows padded (wte: its slice of the padded vocabulary). A 1-D tensor is rows of
    // length 1.
    int64_t rows_stored;
    int64_t cols_stored = 1;
    int64_t offset;        // in floats, from the start of the flat buffer
    int64_t numel_stored;  // rows_stored * cols_stored
    int unit;
    bool decay;  // AdamW weight decay applies to matrices, not to biases and LayerNorm gains
    Init init;
    float init_std;
    // The dimension tensor parallelism splits across its ranks, as Megatron-LM does: 0 for the
    // column-parallel qkv and MLP-up projections (and their biases) and the vocabulary-parallel
    // embedding, 1 for the row-parallel projections back into the residual stream; -1 for the
    // tensors every rank keeps whole. ZeRO does not use it: it slices the flat buffer.
    int tp_dim = -1;
    // The split dimension is this many blocks, each split over the ranks: qkv is [q; k; v], and
    // a rank keeps its heads of each (Megatron's layout), so 3.
    int tp_blocks = 1;
    int64_t numel_logical() const;
};

struct Unit {
    int64_t offset, size;  // range of the flat buffer (includes alignment padding)
    int first_tensor = 0;  // index of the unit's first tensor in ParamLayout::tensors
    int tensors = 0;       // how many; 0 when this rank does not hold the unit
    bool held = true;
};

// Which part of the model one rank holds. A pipeline stage holds some units (its layers; the
// first stage the embeddings, the last the final norm and, for the tied head, the embeddings
// too). Tensor parallelism (tp > 1) keeps a 1/tp slice of each split tensor.
struct ModelShard {
    std::vector<bool> units;  // per unit (n_layer + 2); empty: every unit
    int tp_rank = 0, tp = 1;
    bool holds(int unit) const { return units.empty() || units[size_t(unit)]; }
};

struct ParamLayout {
    std::vector<ParamSpec> tensors;  // of the units held, in unit order
    std::vector<Unit> units;         // n_layer + 2, held or not (size 0)
    int64_t total = 0;               // floats in the flat buffer
    int tp_rank = 0, tp = 1;         // the tensor-parallel shard these tensors are

    const ParamSpec& find(const std::string& name) const;  // error naming the tensor if absent
};

ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard = {});

// Fills every tensor from Philox keyed by (seed, name), element by logical index, so any shard of
// any layout gets the same numbers. Padding stays zero.
void init_params(float* flat, const ParamLayout& layout, uint64_t seed);

// Index in the logical tensor (row-major, logical shape) of element `i` of the stored shard, or
// -1 for a padding row (beyond the real vocabulary).
int64_t logical_index(const ParamSpec& p, int tp_rank, int tp, int64_t i);
// Between a tensor's stored shard (numel_stored floats) and the whole logical tensor
// (numel_logical floats): take_shard fills the shard (padding rows zero), place_shard writes the
// shard's elements into the logical tensor.
void take_shard(const ParamSpec& p, int tp_rank, int tp, const float* logical, float* shard);
void place_shard(const ParamSpec& p, int tp_rank, int tp, const float* shard, float* logical);

// Pointers into one block's tensors, given the flat buffer (params or grads) base.
struct BlockView {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
struct EmbedView {
    float *wte, *wpe;
};
struct FinalView {
    float *lnf_w, *lnf_b;
};

// `unit_base` points at the start of the unit (flat + units[u].offset, or a gathered copy); the
// unit must be held.
BlockView block_view(float* unit_base, const ParamLayout& layout, int layer);
EmbedView embed_view(float* unit_base, const ParamLayout& layout);
FinalView final_view(float* unit_base, const ParamLayout& layout, int n_layer);

}  // namespace weft::model
