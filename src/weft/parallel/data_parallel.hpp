#pragma once
// Data parallelism with ZeRO stages 0-3 over the dp axis of a mesh, as the model's UnitAccess.
//
//   stage 0  every rank holds parameters, gradients and optimizer states whole; gradients are
//            all-reduced in buckets while backward runs.
//   stage 1  as 0, but each rank updates only its slices (optimizer states sharded); the updated
//            slices are all-gathered, unit by unit, while the next forward starts.
//   stage 2  as 1, but gradients are reduce-scattered: a unit's gradient lives in a bucket
//            temporary from its first write until its reduction is posted; each rank keeps only
//            its gradient shard. (With several micro-batches this reduces every micro-batch, as
//            DeepSpeed's stage 2 does: the unreduced gradient is not kept across them.)
//   stage 3  as 2, and parameters are sharded too: a unit is all-gathered just before its
//            forward and again before its backward, freed after each, and the next unit is
//            prefetched (zero_params.hpp).
//
// The trainer calls begin_step, then per micro-batch begin_forward / forward / begin_backward /
// backward, then end_backward (every reduction done), updates update_slices() with its
// optimizer, and calls after_update. Everything here is collective over the dp group: every
// rank makes the same calls in the same order. See docs/data_parallel.md.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/parallel/buffer_pool.hpp"
#include "weft/parallel/inflight.hpp"
#include "weft/parallel/working_copy.hpp"
#include "weft/parallel/zero_layout.hpp"

namespace weft::parallel {

class GradReducer;
class ParamGatherer;

struct DataParallelOptions {
    int zero = 0;             // ZeRO stage 0..3
    double bucket_mb = 25.0;  // gradient bucket size, MiB of fp32
    // --grad-reduce-dtype bf16: gradients travel as bf16, summed in fp32 (zero_grads.hpp).
    bool bf16_grad_reduce = false;
    // Expert parallelism: the expert-data-parallel group expert tensors' gradients reduce over
    // and their ZeRO slices are cut over (comm::Mesh::expert_dp); null without. Needs the
    // layout's ep > 1 and expert runs aligned (zero_layout.hpp); fp32 reduction only so far.
    comm::Group* expert_dp = nullptr;
    // The optimizer (optim/registry.hpp) the state is counted for; one without gradients
    // (zeroth order) gets no gradient buffer, and only forward passes may run.
    std::string optimizer = "adamw";
    // --dtype bf16 --offload optimizer: the weights and gradients are held as the bf16 working
    // copy (working_copy.hpp), the fp32 master with the optimizer's state elsewhere. ZeRO 0 or
    // 1 (the copy is the whole buffer on every rank), without expert parallelism.
    bool bf16_working_copy = false;
    // --grad-dtype bf16: the gradients the working copy keeps as bf16 are rounded to bf16 once
    // reduced (in memory: in place, TrainState::step), whether or not they are stored so.
    bool bf16_grads = false;
    // --offload optimizer+params: the working copy (bf16 as above, or all fp32 without
    // bf16_working_copy) in files under this directory, a few units in memory at a time
    // (working_copy.hpp); the same layouts as the bf16 working copy. Empty: none, or in memory.
    std::filesystem::path params_dir = {};
};

// Model-state memory of one rank: parameters, gradients, the optimizer's state (persistent
// buffers; per-unit temporaries are not model state).
struct ModelStateBytes {
    int64_t params = 0, grads = 0, optimizer = 0;
    // With a bf16 working copy: the fp32 master weights of the ranges the rank updates (params
    // and grads are then the working copy's).
    int64_t master = 0;
    // With the working copy in files (--offload optimizer+params): their bytes, on disk and not
    // in total() (params and grads are then the records memory holds at most).
    int64_t copy_files = 0;
    int64_t total() const { return params + grads + optimizer + master; }
};

// What a rank allocates for the layout `z` at ZeRO `stage` with `optimizer`, whatever --dtype
// is: the weights and gradients are fp32 (bf16 rounds only the operands of the matrix products,
// into per-thread scratch), the optimizer's state what it counts for the ranges it updates
// (optim::optimizer_state_bytes: stage 0 the whole buffer, else this rank's slices); so the
// planner's engine profile and the trainer's estimate read these two functions rather than a
// byte count per parameter of their own.
// With a working copy, bf16 or in files (DataParallelOptions), its weights and gradients.
ModelStateBytes zero_state_bytes(const ZeroLayout& z, int stage,
                                 std::string_view optimizer = "adamw",
                                 bool bf16_working_copy = false, bool copy_in_files = false);
// The temporaries of working_bytes() for buckets of at least `bucket_bytes`, gradients reduced
// in bf16 or not (DataParallelOptions::bf16_grad_reduce); none for gradients when the optimizer
// takes none.
int64_t zero_working_bytes(const ZeroLayout& z, int stage, int64_t bucket_bytes, bool bf16_reduce,
                           bool gradients = true, bool bf16_working_copy = false,
                           bool copy_in_files = false);

class DataParallel : public model::UnitAccess {
  public:
    DataParallel(const model::ParamLayout& layout, comm::Group& dp, DataParallelOptions options);
    ~DataParallel() override;

    const ZeroLayout& zero_layout() const { return z_; }
    const model::ParamLayout& padded() const { return z_.padded(); }
    int stage() const { return stage_; }
    comm::Group& group() { return dp_; }

    // Sets every parameter this rank holds from a whole logical tensor set, unit by unit. With
    // a bf16 working copy, `master` also gets each unit's fp32 weights (keep(-1, offset, size,
    // data), the unit's place in the padded buffer).
    void load_params(const UnitFill& fill, const UnitKeep& master = {});
    // Collective: the whole parameter buffer (padded layout) in `out` on dp rank 0; other ranks
    // pass nullptr. At stages 0-2 rank 0 already holds it: returns a pointer to it, else `out`.
    const float* gather_params(float* out);
    // Collective: a buffer shaped as this rank's shard (per slice) from every rank, whole, into
    // `out` (padded layout) on dp rank 0.
    void gather_shard(const float* shard, float* out);

    void begin_step();
    void begin_forward(bool last_micro_batch);
    // For schedules that interleave micro-batches (a pipeline): whether the backward about to
    // run is the step's last for its units, so that stages 0-1 reduce after it. Stages 0-1 only.
    void set_last_micro_batch(bool last);
    void begin_backward();
    // Waits for every gradient reduction: the gradients of update_slices() are final.
    void end_backward();

    // The ranges this rank's optimizer updates: stage 0 the whole buffer, else its slices. The
    // pointers address element `begin` of the slice in the parameter and gradient storage.
    const std::vector<ShardSlice>& update_slices() const { return update_; }
    float* update_params(const ShardSlice& s);
    const float* update_grads(const ShardSlice& s);
    // The working copy (DataParallelOptions::bf16_working_copy, params_dir), else null: the update
    // then reads gradients and writes weights through it, update_params/update_grads having none.
    WorkingCopy* working_copy() { return work_.get(); }
    // --grad-dtype bf16 in memory: rounds the gradients the working copy would keep as bf16
    // (kept_bf16) to bf16 in place, so that an in-memory run takes the offloaded run's steps.
    void round_grads_bf16();
    // Sum of squares of this rank's part of the reduced gradient: every element counted on
    // exactly one rank of the dp group (stage 0: the rank's 1/dp of the buffer; else its
    // slices), and only in tensors `counted` accepts (all if empty): copies of a tensor that
    // other model-parallel ranks also hold are counted once in the whole job.
    double grad_sum_squares(const std::function<bool(const model::ParamSpec&)>& counted = {});
    // After the optimizer: stages 1-2 post the all-gathers of the updated slices.
    void after_update();
    // Waits for every pending operation (before reading parameters outside a step).
    void settle();

    ModelStateBytes model_state_bytes() const;
    // A bound of the temporaries: the gradient reducer's (reducer_temp_bytes: stages 2-3 the
    // bucket of unit 0 from the head's forward on and the one being filled; at every stage the
    // pieces in flight with Open MPI's copies of them); stage 3 also up to three gathered units
    // (unit 0 through forward, the current one, the prefetched one).
    int64_t working_bytes() const;
    OverlapTimes take_overlap_times() { return inflight_.take_times(); }

    float* params(int unit) override;
    float* grads(int unit) override;
    void release(int unit) override;
    void grads_ready(int unit) override;
    // Tests the operations in flight (Open MPI advances them only inside MPI calls).
    void progress() override;

  private:
    comm::Group& dp_;
    comm::Group* edp_;
    int stage_;
    std::string optimizer_;
    bool gradients_;
    ZeroLayout z_;
    std::vector<Bucket> buckets_;
    int64_t bucket_bytes_ = 0;
    bool bf16_reduce_ = false;
    std::vector<ShardSlice> update_;
    BufferPool pool_;  // before inflight_: completions give buffers back to it
    InFlight inflight_;
    Buffer params_;  // stages 0-2: whole (padded layout); stage 3: this rank's shard
    Buffer grads_;   // stages 0-1: whole; stages 2-3: this rank's shard
    std::vector<std::optional<uint64_t>> param_ticket_;  // stages 1-2: pending gather per slice
    std::unique_ptr<GradReducer> reducer_;
    std::unique_ptr<ParamGatherer> gatherer_;  // stage 3
    std::unique_ptr<WorkingCopy> work_;        // bf16_working_copy or params_dir
    bool copy_bf16_ = false, copy_files_ = false;
    bool last_micro_ = true;
};

}  // namespace weft::parallel
