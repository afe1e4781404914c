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

// Expert parallelism as the model sees it: each of the ep ranks holds E/ep consecutive experts
// (ParamSpec::expert), and a layer sends each grouped token row to the rank of its expert and
// gets the expert's output back (parallel/expert_comm.hpp implements it over the ep group).
class ExpertComm {
  public:
    virtual ~ExpertComm() = default;
    virtual int size() const = 0;  // ep
    virtual int rank() const = 0;
    // All-to-all of n values per rank: block j of send[size() n] goes to rank j, which stores it
    // as block rank() of recv[size() n].
    virtual void exchange_counts(const int64_t* send, int64_t* recv, int64_t n) = 0;
    // All-to-all-v of rows of `width` floats: send_rows[j] consecutive rows (in rank order) go to
    // rank j; recv gets recv_rows[j] rows from rank j, in rank order.
    virtual void exchange_rows(const float* send, const int64_t* send_rows, float* recv,
                               const int64_t* recv_rows, int64_t width) = 0;
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
