#pragma once
// The one collective a mixture-of-experts layer needs under data (and context) parallelism, as
// the model sees it: the load-balance loss is a function of how the whole batch was routed, so
// each rank's counts of slots per expert are summed over the ranks that split the batch and
// share the layer's weights, before the loss. No MPI in sight (train/ implements it over the
// group gradients are reduced over).
#include <cstdint>
#include <vector>

namespace weft::model {

class MoeComm {
  public:
    virtual ~MoeComm() = default;
    // In place: every rank ends with the elementwise sum over the group, the same on every rank.
    virtual void sum_counts(double* counts, int64_t n) = 0;
};

// Routing over the forwards since the last take (Model::take_moe_stats): per layer and expert,
// the slots this rank's tokens sent there; this rank's shares of the router losses (coefficients
// and loss scale applied, so summed over the ranks they are what the training loss gained); the
// slots a capacity dropped, of all slots routed.
struct MoeStats {
    int64_t n_experts = 0;       // 0: the model has no MoE layers
    std::vector<double> tokens;  // [n_layer, n_experts]
    double aux_loss = 0, z_loss = 0;
    double dropped = 0, slots = 0;
};

}  // namespace weft::model
