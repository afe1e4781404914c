#include "weft/parallel/parallel_context.hpp"

#include "weft/parallel/expert_comm.hpp"
#include "weft/parallel/tensor_parallel.hpp"

namespace weft::parallel {

namespace {

Layout resolved(Layout layout, const comm::Mesh& mesh) {
    // The mesh has resolved (and refused) the sizes: what can fail here is an option.
    layout.resolve(mesh.world_size());
    return layout;
}

comm::Group& gradient_group_of(comm::Mesh& mesh) {
    return mesh.size(comm::Axis::cp) > 1 ? mesh.add_group({comm::Axis::cp, comm::Axis::dp})
                                         : mesh.group(comm::Axis::dp);
}

}  // namespace

ParallelContext::ParallelContext(comm::Mesh& mesh, const Layout& layout, bool bf16_activations)
    : mesh_(mesh),
      layout_(resolved(layout, mesh)),
      gradients_(gradient_group_of(mesh)),
      bf16_activations_(bf16_activations) {
    if (layout_.tp > 1)
        tp_ = std::make_unique<GroupTpComm>(mesh.group(comm::Axis::tp), bf16_activations);
    // The cp axis holds the ranks of one tp rank (and dp, pp coordinates): under tensor
    // parallelism the ring or the all-to-alls run over this rank's heads.
    cp_ = make_cp_comms(mesh.group(comm::Axis::cp), layout_.cp_kind, layout_.cp_ulysses);
    if (layout_.ep > 1) expert_ = std::make_unique<GroupExpertComm>(mesh.group(comm::Axis::ep));
    if (gradients_.size() > 1) moe_ = std::make_unique<GroupMoeComm>(gradients_);
}

ParallelContext::~ParallelContext() = default;

comm::Group* ParallelContext::expert_dp_group() const {
    return layout_.ep > 1 ? &mesh_.expert_dp() : nullptr;
}

}  // namespace weft::parallel
