#pragma once
// Gradient reduction in buckets, posted from the grads_ready hook while backward goes on.
//
// Whole (stages 0-1): gradients accumulate in the whole buffer over the micro-batches; on the
// last one a bucket is all-reduced in place once backward has finished its last unit.
// Sharded (stages 2-3): a bucket's gradient lives in a temporary from the first write of a
// micro-batch; when backward has finished the bucket it is reduce-scattered (packed rank-major
// first when it holds several units) and the temporary goes back to the pool. The
// reduce-scatter is an all-to-all of the packed blocks, each rank adding the dp blocks it
// receives into its gradient shard in rank order when the operation completes: the same bytes
// as MPI's reduce-scatter, without libnbc's copy of twice the message (below), and the same sum
// order on any MPI.
//
// bf16 (--grad-reduce-dtype bf16, dp > 1): the gradients travel as bf16 but are summed in fp32
// (bf16_wire.hpp). Sharded: the all-to-all carries the packed blocks in bf16, and each rank adds
// the dp blocks it receives, widened, into its shard in rank order. Whole: an all-to-all of the
// bucket's bf16 blocks while backward goes on, each rank summing its block in fp32 and rounding
// the sum once; finish() then all-gathers every bucket's bf16 sums, in bucket order on every
// rank, so every rank holds the same bits, as the fp32 all-reduce gives.
//
// Expert parallelism (`expert_dp`, fp32 only): the ranges of expert tensors (ParamSpec::expert)
// are reduced over the expert-data-parallel group, the rest of the bucket over dp, so each
// expert's gradient sums the shares of exactly the ranks holding it. Whole: each run of the
// bucket is all-reduced over its group. Sharded: one all-to-all per group, of the bucket's parts
// of that group packed group-rank-major (the layout's expert parts are sliced over edp).
//
// Memory in flight: Open MPI's nonblocking reductions (libnbc) allocate a temporary from the post
// to the completion of each operation, the size of the message for an iallreduce and twice the
// whole message for an ireduce_scatter_block (which is why the sharded path does not use it;
// all-to-alls need none). So no message is much larger than a bucket: a run or block of at
// least two buckets' worth is cut into pieces of at least --bucket-mb of fp32 gradient each
// (GPT-2's tied embedding, 147 MiB, into six of the default 25 MiB), and at most kMaxInFlight
// pieces are in flight: posting another first waits for the oldest. Posts happen only in
// ready(), in the same order on every rank, so the wait changes no rank's order of collectives.
// With one piece moving and one queued behind it the link never idles, so the cap costs no time
// when reduction is the bottleneck.
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/parallel/buffer_pool.hpp"
#include "weft/parallel/inflight.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {

inline constexpr int kMaxInFlight = 2;

// The most GradReducer holds besides the gradients themselves, with the libnbc temporaries
// above, for `buckets` made with `bucket_bytes`; dp > 1 (at dp = 1 nothing leaves the rank).
int64_t reducer_temp_bytes(const ZeroLayout& z, const std::vector<Bucket>& buckets,
                           int64_t bucket_bytes, bool sharded, bool bf16);

class GradReducer {
  public:
    // `grads` is the whole buffer (padded layout) unless `sharded`, then this rank's shard.
    // Sharded, the buckets' temporaries and the pieces' buffers come from `pool`.
    GradReducer(const ZeroLayout& z, const std::vector<Bucket>& buckets, int64_t bucket_bytes,
                comm::Group& dp, InFlight& inflight, BufferPool& pool, float* grads, bool sharded,
                bool bf16 = false, comm::Group* expert_dp = nullptr);

    float* unit_grads(int unit);
    void ready(int unit, bool last_micro_batch);
    // After every operation in flight is done (InFlight::wait_all): the second half of a whole
    // bf16 reduction. Nothing to do otherwise.
    void finish();

  private:
    // Waits for a place among the kMaxInFlight, then posts what `start` posts (its ticket).
    template <class Start>
    void post(Start start);
    // Whole bf16: the piece [begin, end) of the buffer over group g, in g.size() equal blocks.
    void post_run_bf16(comm::Group& g, int64_t begin, int64_t end);
    // Sharded: per group, one reduce-scatter (all-to-all in bf16) per piece of the bucket's block.
    void post_sharded(int bucket);

    const ZeroLayout& z_;
    const std::vector<Bucket>& buckets_;
    int64_t bucket_floats_;
    // Sharded: every piece's buffers are taken at the largest piece's size, so that the pool
    // keeps kMaxInFlight of each whatever the pieces' sizes (the embedding's and the blocks'
    // would otherwise be kept apart, as sizes more than a quarter apart are).
    int64_t message_floats_;
    comm::Group& dp_;
    InFlight& inflight_;
    BufferPool& pool_;
    float* grads_;
    bool sharded_;
    std::vector<int> bucket_of_;  // per unit
    std::vector<Buffer> temp_;    // per bucket, sharded only
    bool bf16_;
    std::deque<uint64_t> posted_;  // tickets of the pieces that may be in flight
    // Whole bf16: per piece posted (of a bucket, or with expert_dp of each of its runs), the bf16
    // sums all-gathered by finish() in the order posted (this rank's block filled when its
    // all-to-all completes).
    struct Bf16Run {
        comm::Group* group;
        int64_t begin, end;
        std::shared_ptr<Bf16Buffer> summed;
    };
    std::vector<Bf16Run> bf16_runs_;
    // Whole, per bucket: its ranges in buffer order and the group each reduces over (one run
    // over dp without expert_dp).
    struct Run {
        int64_t begin, end;
        comm::Group* group;
    };
    std::vector<std::vector<Run>> runs_;
    comm::Group* edp_;
};

}  // namespace weft::parallel
