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
    int64_t rows_stored;         // rows held in the buffer (wte: the padded vocabulary)
    int64_t offset;              // in floats, from the start of the flat buffer
    int64_t numel_stored;        // rows_stored * row length
    int unit;
    bool decay;  // AdamW weight decay applies to matrices, not to biases and LayerNorm gains
    Init init;
    float init_std;
    // The dimension tensor parallelism splits across its ranks, as Megatron-LM does: 0 for the
    // column-parallel qkv and MLP-up projections (and their biases) and the vocabulary-parallel
    // embedding, 1 for the row-parallel projections back into the residual stream; -1 for the
    // tensors every rank keeps whole. ZeRO does not use it: it slices the flat buffer.
    int tp_dim = -1;
    int64_t numel_logical() const;
};

struct Unit {
    int64_t offset, size;  // range of the flat buffer (includes alignment padding)
};

struct ParamLayout {
    std::vector<ParamSpec> tensors;
    std::vector<Unit> units;  // n_layer + 2
    int64_t total = 0;        // floats in the flat buffer

    const ParamSpec& find(const std::string& name) const;  // error naming the tensor if absent
};

ParamLayout build_param_layout(const ModelConfig& cfg);

// Fills every tensor from Philox keyed by (seed, name), element by logical index, so any shard of
// any layout gets the same numbers. Padding stays zero.
void init_params(float* flat, const ParamLayout& layout, uint64_t seed);

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

// `unit_base` points at the start of the unit (flat + units[u].offset, or a gathered copy).
BlockView block_view(float* unit_base, const ParamLayout& layout, int layer);
EmbedView embed_view(float* unit_base, const ParamLayout& layout);
FinalView final_view(float* unit_base, const ParamLayout& layout, int n_layer);

}  // namespace weft::model
