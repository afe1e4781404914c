#pragma once
// One rank's part of the model, its share of the training state (parameters, gradients and
// optimizer state as its pipeline stage, tensor-parallel shard and ZeRO stage keep them), and one
// optimizer step over it (a zeroth-order optimizer's: two forward passes, no backward): what `weft
// train` and `weft bench train` run. Where the state comes from and goes to is
// state_checkpoint.hpp, what it weighs state_memory.hpp. The layout is the context's, and so are
// the communicators (parallel/parallel_context.hpp): TrainState builds none. Every call is
// collective over the whole mesh.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/data/token_file.hpp"
#include "weft/model/model.hpp"
#include "weft/offload/streamed_state.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/parallel/parallel_context.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/train/evaluate.hpp"
#include "weft/train/pipeline_stage.hpp"
#include "weft/train/tied_embedding.hpp"

namespace weft::train {

// What the layout does not say: how the layers are cut into pipeline chunks.
struct ModelParallelOptions {
    std::string pp_layers;  // "3,3,2,2" or empty (even)
};

// --offload optimizer: the optimizer's state (AdamW's moments, 8-bit AdamW's codes and absmaxes)
// of this rank's shard lives in files under `dir` and each step streams it through a pool of
// groups of `group_floats` (offload/streamed_state.hpp).
// Without a working copy the weights and gradients stay in memory as they are without offload
// (fp32 whatever --dtype: they are the master copy). With one (DataParallelOptions::
// bf16_working_copy, or params_dir for --offload optimizer+params, where the copy itself is in
// files too) the fp32 master weights are one more stream of the files, and each group's update
// rounds them into the working copy. MeZO, which has no state, puts its master alone there (and
// without a working copy nothing).
struct OffloadOptions {
    std::filesystem::path dir;  // empty: the moments stay in memory
    int64_t group_floats = int64_t(4) << 20;
};

struct StepOutcome {
    double loss_sum = 0;   // over the global batch (every rank's tokens)
    double grad_norm = 0;  // of the whole reduced gradient, before clipping
    // Mixture of experts: the step's routing over the global batch (tokens per layer and expert,
    // the router losses added to the training loss, dropped slots); n_experts 0 for a dense model.
    model::MoeStats moe;
    // Aux-loss-free balancing: the largest |router bias| after the step moved it (none when the
    // model does not balance).
    std::optional<double> router_bias_max_abs;
};

// The part of the model the rank at pipeline rank `pp_rank`, tp rank `tp_rank` and index
// `data_rank` in the cp x dp group (cp_rank + cp * dp_rank) of `mesh` holds: its units, tp
// shard, ep slice of the experts and the alignment of its expert runs (what TrainState builds
// its model with, and a checkpoint plan describes).
model::ModelShard model_shard(const comm::Mesh& mesh, int pp_rank, int tp_rank, int data_rank,
                              const pipeline::Partition& part, const model::ModelConfig& cfg);

class TrainState {
  public:
    // `micro` sequences of T tokens per forward pass. Gradients are reduced over the context's
    // gradient group: the mesh's dp axis, or with context parallelism its cp x dp group, each
    // cp rank holding T / cp tokens of every sequence (Model::set_context_parallel). The context
    // must outlive this object. options.optimizer names the optimizer (optim/registry.hpp).
    TrainState(const model::ModelConfig& cfg, const parallel::ParallelContext& ctx,
               parallel::DataParallelOptions options, int64_t micro, int64_t T,
               const ModelParallelOptions& mp = {}, const OffloadOptions& offload = {});
    ~TrainState();

    // One optimizer step (1-based t) over `micro_batches` forward/backward passes; fill(m) puts
    // this rank's micro-batch m into activations().
    StepOutcome step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                     float loss_scale, const optim::OptimConfig& oc, float lr, int64_t t);

    // Mean loss over the first `batches` batches of B sequences of the file, split over the dp
    // ranks (B must be a multiple of dp * micro); the same value on every rank.
    EvalResult evaluate(const data::TokenFile& file, int64_t B, int64_t batches);

    // The measured pipeline timeline of the last step, when recording (set_trace(true)).
    void set_trace(bool on) { trace_on_ = on; }
    const std::vector<pipeline::TraceRecord>& trace() const { return trace_; }
    const pipeline::Schedule& schedule() const { return schedule_; }
    // The zero-bubble schedules: each chunk's F, B + W and W (us) measured in the first step,
    // which the schedule of every later step is made for; no chunk costs before (or for other
    // kinds).
    const pipeline::Costs& stage_costs() const { return stage_costs_; }
    // Whether those are CPU times (the ranks oversubscribed their node's cores).
    bool stage_costs_cpu() const { return stage_costs_cpu_; }

    comm::Mesh& mesh() const { return mesh_; }
    const Layout& layout() const { return ctx_.layout(); }
    const model::Model& model() const { return *model_; }
    model::Model& model() { return *model_; }
    parallel::DataParallel& dp() { return dp_; }
    const parallel::DataParallel& dp() const { return dp_; }
    // One per slice of dp().update_slices(), holding that slice's optimizer state; a zeroth-order
    // optimizer, which has none, one per range of parameters the rank holds (the whole buffer
    // below ZeRO 3).
    std::vector<std::unique_ptr<optim::Optimizer>>& optimizers() { return opt_; }
    const optim::OptimizerSpec& optimizer() const { return *spec_; }
    // Where fill(m) puts micro-batch m's tokens (inputs and targets): with context parallelism
    // this rank's T / cp of each sequence, at activations().positions.
    model::Activations& activations() { return *act_; }
    const model::Activations& activations() const { return *act_; }
    const pipeline::Partition& partition() const { return part_; }
    // This rank's pipeline stage; null without a pipeline (pp = 1).
    const PipelineStage* stage() const { return stage_.get(); }
    const TiedEmbedding& tied_embedding() const { return tied_; }
    int pipeline_rank() const { return pp_rank_; }
    // Whether ranks hold different parts of the model (pipeline stages or tensor shards).
    bool model_parallel() const { return pp_ > 1 || tp_ > 1; }
    // With offload the moments in memory are the pool's groups; their files are on disk.
    parallel::ModelStateBytes model_state_bytes() const;

    // The state's files and their streaming, with --offload (else null); what the last step's
    // pass moved, and what writing then reading the initial state did (the disk's bandwidth).
    offload::StreamedState* offloaded() { return offload_.get(); }
    const offload::StreamedState* offloaded() const { return offload_.get(); }
    const offload::PassStats& last_offload_pass() const { return offload_last_; }
    // Whether the optimizer's pass over the files runs behind the next step's forward (a bf16
    // working copy in memory on a single rank: docs/memory.md); and waits for the one running.
    bool update_behind() const { return update_behind_; }
    void finish_update();
    // Seconds the steps since the last call were blocked by the optimizer's pass: behind the
    // forward, the forward's waits for it; else the last pass's whole time.
    double take_update_blocked_s();
    const offload::PassStats& offload_init_write() const { return offload_init_[0]; }
    const offload::PassStats& offload_init_read() const { return offload_init_[1]; }
    // The offload files' stream of the fp32 master weights (after the optimizer's moments), or
    // -1 when the weights in memory are the master.
    int master_stream() const { return master_stream_; }
    // Writes fp32 master weights [begin, begin + n) of the padded buffer (what the rank
    // updates) into the offload files: a UnitKeep for DataParallel::load_params; and reads them.
    void write_master(int64_t begin, int64_t n, const float* data);
    void read_master(int64_t begin, int64_t n, float* out) const;
    // Moment k (Optimizer::read_moment) of elements [at, at + n) of optimizer i's range, from
    // the optimizer or with --offload from its files (a group at a time, whatever the
    // optimizer stores: 8-bit AdamW's codes are dequantised, and requantised on write).
    void read_moment(size_t i, int k, int64_t at, int64_t n, float* out);
    void write_moment(size_t i, int k, int64_t at, int64_t n, const float* in);

  private:
    // Forward and backward of every micro-batch; returns this rank's loss sum.
    double run_micro_batches(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                             float loss_scale);
    // MeZO's step: the loss at w + eps z and at w - eps z over the same micro-batches, then the
    // update along z (optim/mezo.hpp).
    StepOutcome zeroth_order_step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                                  float loss_scale, const optim::OptimConfig& oc, float lr,
                                  int64_t t);
    // In an offloaded group's array of stream k of slice i, which starts at element a (at
    // `at_a`): where element x starts.
    std::byte* state_at(int i, int k, int64_t a, int64_t x, std::byte* at_a) const;
    void master_io(bool write, int64_t begin, int64_t n, float* data) const;
    // The offloaded streams moment k of optimizer i is read from (a bit each).
    uint32_t moment_streams(size_t i, int k) const;
    // MeZO with its master in the offload files: a pass over it that perturbs each group by
    // `scale` z (and then, with `args`, updates it) and rounds it into the working copy.
    offload::PassStats zeroth_order_pass(float scale, uint64_t seed, int64_t t,
                                         const optim::StepArgs* args);
    // The loss exists on the last stage, the same on every tp rank of it: counted there once.
    bool counts_loss() const;
    // Sums `values` over the ranks that together hold the model: the world with model
    // parallelism, else the dp group.
    void sum_over_model(std::span<double> values);
    // The measured costs of this step's chunks, the same on every rank (collective over the
    // world).
    pipeline::Costs gather_stage_costs();

    const parallel::ParallelContext& ctx_;
    comm::Mesh& mesh_;
    int pp_, pp_rank_, tp_, tp_rank_;
    pipeline::Partition part_;
    std::unique_ptr<model::Model> model_;
    parallel::DataParallel dp_;
    TiedEmbedding tied_;
    const optim::OptimizerSpec* spec_;
    std::vector<std::unique_ptr<optim::Optimizer>> opt_;
    std::unique_ptr<offload::StreamedState> offload_;
    offload::PassStats offload_last_, offload_init_[2];
    bool update_behind_ = false;
    std::thread update_thread_;        // the pass behind the forward
    offload::PassStats update_stats_;  // what it moved, read once it is joined
    int master_stream_ = -1;
    bool round_grads_ = false;  // --grad-dtype bf16 in memory
    Buffer grad_group_;         // a group's gradients widened for the update (working copy)
    std::unique_ptr<model::Activations> act_;
    std::unique_ptr<PipelineStage> stage_;  // pp > 1
    pipeline::Schedule schedule_;
    int64_t schedule_micro_ = 0;
    // A zero-bubble step to time (the first with a new micro-batch count), and its costs until
    // the schedule is rebuilt from them at the next step.
    bool measure_costs_ = false;
    std::optional<pipeline::Costs> measured_costs_;
    pipeline::Costs stage_costs_;
    bool stage_costs_cpu_ = false;
    bool trace_on_ = false;
    std::vector<pipeline::TraceRecord> trace_;
};

}  // namespace weft::train
