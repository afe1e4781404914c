#pragma once
// The model's tensor-parallel collectives (model::TpComm) on a comm::Group, normally the mesh's
// tp axis: each call is one counted collective, so the bytes tensor parallelism moves are
// reported per axis with everything else (docs/tensor_parallel.md gives the expected counts).
#include "weft/comm/mesh.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/parallel/bf16_wire.hpp"

namespace weft::parallel {

class GroupTpComm : public model::TpComm {
  public:
    // The group must outlive this object. `bf16_wire`: activations and their gradients travel
    // as bf16 (bf16_wire.hpp), the exact sums and the max as fp32.
    explicit GroupTpComm(comm::Group& group, bool bf16_wire = false)
        : group_(group), bf16_(bf16_wire) {}

    int rank() const override { return group_.rank(); }
    int size() const override { return group_.size(); }
    void all_reduce_sum(float* x, int64_t n) override;
    void all_reduce_sum_exact(float* x, int64_t n) override;
    void all_reduce_max(float* x, int64_t n) override;
    void all_gather(const float* in, float* out, int64_t n) override;
    void reduce_scatter_sum(const float* in, float* out, int64_t n) override;

    comm::Group& group() const { return group_; }

  private:
    comm::Group& group_;
    bool bf16_;
    Bf16Collectives wire_;
};

}  // namespace weft::parallel
