#pragma once
// Gradient reduction in buckets, posted from the grads_ready hook while backward goes on.
//
// Whole (stages 0-1): gradients accumulate in the whole buffer over the micro-batches; on the
// last one a bucket is all-reduced in place once backward has finished its last unit.
// Sharded (stages 2-3): a bucket's gradient lives in a temporary from the first write of a
// micro-batch; when backward has finished the bucket it is reduce-scattered (packed rank-major
// first when it holds several units) and the temporary is freed; this rank's block is added
// into the gradient shard when the operation completes.
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/parallel/inflight.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {

class GradReducer {
  public:
    // `grads` is the whole buffer (padded layout) unless `sharded`, then this rank's shard.
    GradReducer(const ZeroLayout& z, const std::vector<Bucket>& buckets, comm::Group& dp,
                InFlight& inflight, float* grads, bool sharded);

    float* unit_grads(int unit);
    void ready(int unit, bool last_micro_batch);

  private:
    const ZeroLayout& z_;
    const std::vector<Bucket>& buckets_;
    comm::Group& dp_;
    InFlight& inflight_;
    float* grads_;
    bool sharded_;
    std::vector<int> bucket_of_;  // per unit
    std::vector<Buffer> temp_;    // per bucket, sharded only
};

}  // namespace weft::parallel
