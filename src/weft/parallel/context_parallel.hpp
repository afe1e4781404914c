#pragma once
// The model's context-parallel ring (model::CpComm) on a comm::Group, the mesh's cp axis: each
// shift is one counted send and one counted receive, so the bytes ring attention moves are
// reported on the cp axis with everything else (docs/context_parallel.md gives the counts).
#include "weft/comm/collectives.hpp"
#include "weft/comm/mesh.hpp"
#include "weft/model/cp_comm.hpp"

namespace weft::parallel {

class GroupCpComm : public model::CpComm {
  public:
    // The group must outlive this object.
    explicit GroupCpComm(comm::Group& group) : group_(group) {}

    int rank() const override { return group_.rank(); }
    int size() const override { return group_.size(); }
    void start_shift(const float* send, float* recv, int64_t n) override;
    void wait_shift() override;
    void all_to_all(const float* in, float* out, int64_t n) override;

  private:
    comm::Group& group_;
    comm::Request send_, recv_;
};

}  // namespace weft::parallel
