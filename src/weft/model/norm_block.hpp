#pragma once
// The norm of the residual stream, written once for every family: LayerNorm (GPT-2: weight and
// bias, mean and rstd kept) or RMSNorm (Llama, Qwen2, Mixtral: weight, rstd kept), with what
// sequence parallelism asks of it chosen here and nowhere else:
//   - forward: each rank normalises its own rows, then every rank's rows are gathered, the input
//     of the column-parallel product that follows (TpRegions::own_rows, gather_rows);
//   - backward: the norms' weights see only this rank's rows, so their gradients are collected
//     apart and summed over the ranks once per unit (TpRegions::add_replicated_grads).
// A unit's backward is begin_backward, then backward for each of its norms (slot 0, 1, ...),
// then end_backward.
#include <cstdint>

#include "weft/core/buffer.hpp"
#include "weft/model/tp_regions.hpp"

namespace weft::model {

class NormBlock {
  public:
    enum class Kind { layer_norm, rms_norm };
    // A norm's statistics, kept for backward ([rows] each; mean null for RMSNorm).
    struct Stats {
        float* mean;
        float* rstd;
    };
    // Its parameters or their gradients (bias null for RMSNorm).
    struct Tensors {
        float* w;
        float* b = nullptr;
    };

    // `tp`: the family's regions, which must outlive the block; `width` the residual stream's C.
    NormBlock(Kind kind, int64_t width, float eps, TpRegions& tp);

    // out [B*T, C]: this rank's `rows` rows of x [rows, C] normalised into its rows of out, then
    // (sequence parallel) every rank's rows gathered into out.
    void forward(float* out, Stats st, const float* x, Tensors p, int64_t rows);

    void begin_backward();
    // dx [rows, C] += the input's gradient from dout [rows, C]; the parameters' gradients are
    // accumulated into g, or under sequence parallelism into this unit's partial sums at `slot`.
    void backward(int slot, float* dx, Tensors g, const float* dout, const float* x, Tensors p,
                  Stats st, int64_t rows);
    // Sequence parallel: the partial sums of every slot since begin_backward, summed over the
    // ranks, added into their gradients.
    void end_backward();

    // Floats of the partial sums the block holds (none unless sequence parallel).
    static int64_t scratch_floats(Kind kind, int64_t width, bool sequence_parallel);

  private:
    static constexpr int max_slots = 2;  // norms per unit
    int tensors() const { return kind_ == Kind::layer_norm ? 2 : 1; }

    Kind kind_;
    int64_t C_;
    float eps_;
    TpRegions& tp_;
    Buffer partial_;                  // sequence parallel: [max_slots * tensors() * C]
    float* dst_[2 * max_slots] = {};  // the gradients each slot's partial sums go to
    int slots_ = 0;                   // slots used since begin_backward
};

}  // namespace weft::model
