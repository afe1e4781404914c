#pragma once
// The communicators a run's model and gradients use, built once from the mesh and the layout:
// the trainer and the benchmark build one and hand it to TrainState, which builds none. It owns
// the model-facing interfaces (TpComm, CpComm, ExpertComm, MoeComm) on the mesh's groups, so the
// model still sees no MPI, and names the group gradients are reduced over.
#include <memory>

#include "weft/comm/mesh.hpp"
#include "weft/core/layout.hpp"
#include "weft/model/cp_comm.hpp"
#include "weft/model/moe_comm.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/parallel/context_parallel.hpp"

namespace weft::parallel {

class ParallelContext {
  public:
    // Collective over the mesh (it adds the cp x dp group with context parallelism). Resolves
    // `layout` against the mesh's world and throws weft::Error naming an option the degrees do
    // not allow (--sequence-parallel at tp 1, ...). `bf16_activations`: --dtype bf16.
    ParallelContext(comm::Mesh& mesh, const Layout& layout, bool bf16_activations);
    ~ParallelContext();
    ParallelContext(const ParallelContext&) = delete;
    ParallelContext& operator=(const ParallelContext&) = delete;

    comm::Mesh& mesh() const { return mesh_; }
    // Resolved: dp filled in, every option checked against the degrees.
    const Layout& layout() const { return layout_; }
    // Where gradients (and ZeRO shards) are reduced: cp x dp with context parallelism, as
    // Megatron-LM reduces them, else dp.
    comm::Group& gradient_group() const { return gradients_; }
    // Expert gradients reduce over the ranks holding the same experts; null when ep is 1.
    comm::Group* expert_dp_group() const;

    model::TpComm* tp() const { return tp_.get(); }  // null at tp 1
    // Null at cp 1; with the hybrid, this rank's Ulysses group (cp_ring(): the ring across them).
    model::CpComm* cp() const { return cp_.main.get(); }
    model::CpComm* cp_ring() const { return cp_.ring.get(); }
    model::ExpertComm* expert() const { return expert_.get(); }  // null at ep 1
    // The routing counts' sum over the gradient group; null when that group is one rank.
    model::MoeComm* moe() const { return moe_.get(); }
    // Activations between ranks (tensor-parallel collectives, pipeline messages) travel as bf16.
    bool bf16_activations() const { return bf16_activations_; }

  private:
    comm::Mesh& mesh_;
    Layout layout_;
    comm::Group& gradients_;
    std::unique_ptr<model::TpComm> tp_;
    CpComms cp_;
    std::unique_ptr<model::ExpertComm> expert_;
    std::unique_ptr<model::MoeComm> moe_;
    bool bf16_activations_;
};

}  // namespace weft::parallel
