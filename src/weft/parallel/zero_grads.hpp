#pragma once
// Gradient reduction in buckets, posted from the grads_ready hook while backward goes on.
//
// Whole (stages 0-1): gradients accumulate in the whole buffer over the micro-batches; on the
// last one a bucket is all-reduced in place once backward has finished its last unit.
// Sharded (stages 2-3): a bucket's gradient lives in a temporary from the first write of a
// micro-batch; when backward has finished the bucket it is reduce-scattered (packed rank-major
// first when it holds several units) and the temporary is freed; this rank's block is added
// into the gradient shard when the operation completes.
//
// bf16 (--grad-reduce-dtype bf16, dp > 1): the gradients travel as bf16 but are summed in fp32
// (bf16_wire.hpp). Sharded: an all-to-all of the packed bf16 blocks replaces the reduce-scatter,
// and each rank adds the dp blocks it receives, widened, into its shard in rank order. Whole: an
// all-to-all of the bucket's bf16 blocks while backward goes on, each rank summing its block in
// fp32 and rounding the sum once; finish() then all-gathers every bucket's bf16 sums, in bucket
// order on every rank, so every rank holds the same bits, as the fp32 all-reduce gives.
//
// Expert parallelism (`expert_dp`, fp32 only): the ranges of expert tensors (ParamSpec::expert)
// are reduced over the expert-data-parallel group, the rest of the bucket over dp, so each
// expert's gradient sums the shares of exactly the ranks holding it. Whole: each run of the
// bucket is all-reduced over its group. Sharded: one reduce-scatter per group, of the bucket's
// parts of that group packed group-rank-major (the layout's expert parts are sliced over edp).
#include <cstdint>
#include <memory>
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
                InFlight& inflight, float* grads, bool sharded, bool bf16 = false,
                comm::Group* expert_dp = nullptr);

    float* unit_grads(int unit);
    void ready(int unit, bool last_micro_batch);
    // After every operation in flight is done (InFlight::wait_all): the second half of a whole
    // bf16 reduction. Nothing to do otherwise.
    void finish();

  private:
    // Whole bf16: the run [begin, end) of the buffer over group g, in g.size() equal blocks.
    void post_run_bf16(comm::Group& g, int64_t begin, int64_t end);
    // Sharded with expert parallelism: a reduce-scatter over dp and one over edp.
    void post_sharded_parts(int bucket);

    const ZeroLayout& z_;
    const std::vector<Bucket>& buckets_;
    comm::Group& dp_;
    InFlight& inflight_;
    float* grads_;
    bool sharded_;
    std::vector<int> bucket_of_;  // per unit
    std::vector<Buffer> temp_;    // per bucket, sharded only
    bool bf16_;
    // Whole bf16: per run posted (a bucket, or with expert_dp each of its runs), the bf16 sums
    // all-gathered by finish() in the order posted (this rank's block filled when its
    // all-to-all completes).
    struct Bf16Run {
        comm::Group* group;
        int64_t begin, end;
        std::shared_ptr<std::vector<uint16_t>> summed;
    };
    std::vector<Bf16Run> bf16_runs_;
    // Per bucket with expert_dp: its ranges in buffer order and the group each reduces over.
    struct Run {
        int64_t begin, end;
        comm::Group* group;
    };
    std::vector<std::vector<Run>> runs_;
    comm::Group* edp_;
};

}  // namespace weft::parallel
