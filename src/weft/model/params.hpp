#pragma once
// The parameters of a model as logical tensors laid out in one flat buffer.
//
// Order, for every family: unit 0 holds the embeddings, units 1..L one transformer block each,
// unit L+1 the final norm (and an untied output head). A unit's tensors are contiguous, so a
// pipeline stage owns a range of units, a ZeRO-3 gather fetches one unit, and a gradient bucket
// is a range of the buffer. Each tensor starts on a 64-byte boundary; the few padding floats
// stay zero. The family declares the tensors (family.hpp); this file lays them out.
//
// Names are the family's (GPT-2: Hugging Face's names without "transformer."; Llama: without
// "model."). Matrices are stored [out, in] (torch.nn.Linear).
#include <algorithm>
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
    // Expert tensors ([E, ...], dimension 0 the experts) are split over expert parallelism: ep
    // rank r holds experts [r E/ep, (r+1) E/ep), a contiguous slice whose first logical row is
    // this. Gradients of such tensors are reduced over the expert-data-parallel group, the rest
    // over dp.
    bool expert = false;
    int64_t first_row = 0;
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
    int ep_rank = 0, ep = 1;  // expert parallelism: this rank's slice of the expert tensors
    // Floats: a run of expert tensors starts, and the tensor after it, on a multiple of this
    // from the unit's start (ZeRO slices expert runs over another group than the rest).
    int64_t expert_align = 16;
    bool holds(int unit) const { return units.empty() || units[size_t(unit)]; }
};

struct ParamLayout {
    std::vector<ParamSpec> tensors;  // of the units held, in unit order
    std::vector<Unit> units;         // n_layer + 2, held or not (size 0)
    int64_t total = 0;               // floats in the flat buffer
    int tp_rank = 0, tp = 1;         // the tensor-parallel shard these tensors are
    int ep_rank = 0, ep = 1;         // and the expert-parallel one

    const ParamSpec& find(const std::string& name) const;  // error naming the tensor if absent
};

// How a tensor is split over tensor parallelism (ParamSpec::tp_dim and tp_blocks).
struct TpSplit {
    int dim = -1;
    int blocks = 1;
};
constexpr TpSplit kReplicated{};
constexpr TpSplit kColumn{0, 1};  // rows split: column-parallel weights and their biases
constexpr TpSplit kRow{1, 1};     // columns split: row-parallel weights

// What a family's `declare` writes into: tensors in order, unit by unit.
class ParamDeclarer {
  public:
    ParamDeclarer(ParamLayout& layout, const ModelShard& shard, int64_t units);
    // A tensor of the current unit. `rows_stored` (when not -1) pads the first dimension in the
    // buffer (the vocabulary); it is then split like the rest. Held only if the shard holds the
    // unit. Errors name the tensor when a split dimension does not divide by tp.
    void tensor(std::string name, std::vector<int64_t> shape, Init init, float init_std,
                TpSplit split = kReplicated, int64_t rows_stored = -1);
    // An expert tensor [E, ...]: this rank holds its ep slice of dimension 0 (ParamSpec::expert).
    // Errors name the tensor when E does not divide by ep.
    void expert_tensor(std::string name, std::vector<int64_t> shape, Init init, float init_std);
    void end_unit();
    int unit() const { return unit_; }
    int tp() const { return shard_.tp; }

  private:
    ParamLayout& layout_;
    const ModelShard& shard_;
    int64_t cursor_ = 0, unit_start_ = 0;
    int unit_ = 0, first_tensor_ = 0;
    bool expert_ = false;  // the tensor being declared is an expert tensor
};

// The family's tensors for `shard`; errors when the shard names another count of units.
ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard = {});

// Fills every tensor from Philox keyed by (seed, name), element by logical index, so any shard of
// any layout gets the same numbers. Padding stays zero.
void init_params(float* flat, const ParamLayout& layout, uint64_t seed);

// Index in the logical tensor (row-major, logical shape) of element `i` of the stored shard, or
// -1 for a padding row (beyond the real vocabulary).
int64_t logical_index(const ParamSpec& p, int tp_rank, int tp, int64_t i);
// The stored elements [begin, end) of a shard as runs that are consecutive in the logical tensor
// too: f(i, j, n) for stored elements i .. i + n - 1 at logical j .. j + n - 1 (padding rows
// skipped). A stored row is such a run, and consecutive rows that continue each other join it,
// so the index arithmetic is paid once a row, not once an element (it was most of a 135M
// model's load).
template <class F>
void for_each_logical_run(const ParamSpec& p, int tp_rank, int tp, int64_t begin, int64_t end,
                          F&& f) {
    int64_t run_i = begin, run_j = -1, run_n = 0;
    for (int64_t i = begin; i < end;) {
        const int64_t c = i % p.cols_stored, n = std::min(end - i, p.cols_stored - c);
        const int64_t j = logical_index(p, tp_rank, tp, i);
        if (run_n > 0 && (j < 0 || j != run_j + run_n)) {
            f(run_i, run_j, run_n);
            run_n = 0;
        }
        if (j >= 0 && run_n == 0) run_i = i, run_j = j;
        if (j >= 0) run_n += n;
        i += n;
    }
    if (run_n > 0) f(run_i, run_j, run_n);
}
// Between a tensor's stored shard (numel_stored floats) and the whole logical tensor
// (numel_logical floats): take_shard fills the shard (padding rows zero), place_shard writes the
// shard's elements into the logical tensor.
void take_shard(const ParamSpec& p, int tp_rank, int tp, const float* logical, float* shard);
void place_shard(const ParamSpec& p, int tp_rank, int tp, const float* shard, float* logical);

// Tensor `index` (its position among the unit's tensors, in declaration order) of a unit held
// by this rank, given a pointer to the start of the unit (flat + units[u].offset, or a gathered
// copy): how a family builds its views of a unit's tensors.
float* unit_tensor(float* unit_base, const ParamLayout& layout, int unit, int index);

}  // namespace weft::model
