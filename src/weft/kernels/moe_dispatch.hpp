#pragma once
// Dispatch and combine of a mixture-of-experts layer: the N tokens' rows are copied into one
// buffer grouped by expert (so that each expert's product is one matrix product over its rows),
// and the experts' outputs are brought back and summed with the routing weights.
//
// Each token has k slots (slot t·k + j goes to expert[t·k + j]). Rows inside an expert keep the
// tokens' order (a stable grouping), and a token's output sums its slots in the order j = 0..k-1
// in fp32: the result does not depend on how the rows were grouped, which is what will let
// expert parallelism (the same grouping, spread over ranks) reproduce one process.
//
// Dropless by default. With a capacity, an expert keeps at most that many slots: those of the
// highest routing score (ties to the earlier slot); the rest are dropped, contribute nothing to
// their token's output, and are counted.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::kernels {

struct MoePlan {
    int64_t N = 0, E = 0, k = 0;
    std::vector<int64_t> offsets;      // [E + 1]: expert e's rows are [offsets[e], offsets[e + 1])
    std::vector<int32_t> slot_of_row;  // [rows()]: the slot t·k + j each grouped row holds
    std::vector<int32_t> row_of_slot;  // [N·k]: each slot's grouped row, -1 when dropped
    int64_t dropped = 0;               // slots beyond capacity

    int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
    int64_t rows_of(int64_t e) const { return offsets[size_t(e + 1)] - offsets[size_t(e)]; }
};

// Slots an expert keeps: ceil(factor · N · k / E) (GShard's capacity); factor 0 means dropless
// (returns -1).
int64_t moe_capacity(double factor, int64_t N, int64_t E, int64_t k);

// The grouping of expert[N·k] (values in 0..E-1); `score` [N·k] decides what a full expert
// drops; capacity < 0: none. `plan` is reused (its vectors keep their storage).
void moe_plan(MoePlan& plan, const int32_t* expert, const float* score, int64_t N, int64_t E,
              int64_t k, int64_t capacity = -1);

// xp[rows, C] = the token row of each grouped row: xp[r] = x[slot_of_row[r] / k].
void moe_permute(float* xp, const float* x, const MoePlan& plan, int64_t C);
// dx[N, C] = Σ over the token's kept slots (j ascending) of dxp[row]; overwritten, or added to
// when `accumulate`.
void moe_permute_backward(float* dx, const float* dxp, const MoePlan& plan, int64_t C,
                          bool accumulate);

// y[N, C] = residual + Σ_j weight[t·k + j] · yp[row of slot t·k + j] over the kept slots, the sum
// in fp32 in slot order, then the residual added (null: none).
void moe_unpermute(float* y, const float* yp, const float* weight, const float* residual,
                   const MoePlan& plan, int64_t C);
// Gradients of moe_unpermute (dy its output's): dyp[rows, C] = weight · dy[token] (overwritten),
// dweight[N·k] = <dy[token], yp[row]> (overwritten; 0 for dropped slots).
void moe_unpermute_backward(float* dyp, float* dweight, const float* dy, const float* yp,
                            const float* weight, const MoePlan& plan, int64_t C);

}  // namespace weft::kernels
