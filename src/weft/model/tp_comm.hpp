#pragma once
// The collectives tensor parallelism needs, as the model sees them: named operations over the
// ranks of one tensor-parallel group, with no MPI in sight (parallel/ implements them over a
// comm::Group). Sequence-parallel shards are contiguous row ranges of the [B*T, C] activations:
// rank r holds rows [r*BT/tp, (r+1)*BT/tp), so all_gather concatenates in rank order.
#include <cstdint>

namespace weft::model {

class TpComm {
  public:
    virtual ~TpComm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // In place, every rank ends with the elementwise sum (max) over the group, the same bits on
    // every rank: the computations tensor parallelism replicates must not drift apart.
    // all_reduce_sum, all_gather and reduce_scatter_sum carry activations and their gradients,
    // which an implementation may move in a narrower format (bf16 under --dtype bf16);
    // all_reduce_sum_exact is for what must stay fp32 on the wire: the loss's softmax statistics
    // and the gradients of replicated parameters.
    virtual void all_reduce_sum(float* x, int64_t n) = 0;
    virtual void all_reduce_sum_exact(float* x, int64_t n) { all_reduce_sum(x, n); }
    virtual void all_reduce_max(float* x, int64_t n) = 0;
    // out[size * n] = the `n` floats of every rank, in rank order. `in` may be this rank's own
    // block of out (in place), else must not overlap it.
    virtual void all_gather(const float* in, float* out, int64_t n) = 0;
    // out[n] = sum over ranks of block `rank` of in[size * n].
    virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
};

}  // namespace weft::model
