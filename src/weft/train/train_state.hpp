#pragma once
// One rank's part of the model, its share of the training state (parameters, gradients and
// AdamW moments as its pipeline stage, tensor-parallel shard and ZeRO stage keep them) and one
// optimizer step: what `weft train` and `weft bench train` run. The layout is the mesh's (the dp
// group's mesh). Every call is collective over the whole mesh.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/data/token_file.hpp"
#include "weft/model/model.hpp"
#include "weft/model/tp_comm.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/evaluate.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/pipeline_stage.hpp"

namespace weft::train {

// What the layout does not say: how the layers are cut into pipeline chunks.
struct ModelParallelOptions {
    std::string pp_layers;  // "3,3,2,2" or empty (even)
};

struct StepOutcome {
    double loss_sum = 0;   // over the global batch (every rank's tokens)
    double grad_norm = 0;  // of the whole reduced gradient, before clipping
};

class TrainState {
  public:
    // `micro` sequences of T tokens per forward pass.
    TrainState(const model::ModelConfig& cfg, comm::Group& dp,
               parallel::DataParallelOptions options, int64_t micro, int64_t T,
               const ModelParallelOptions& mp = {});
    ~TrainState();

    parallel::DataParallel& dp() { return dp_; }
    // Where fill(m) puts micro-batch m's tokens (inputs and targets).
    model::Activations& activations() { return *act_; }
    // The measured pipeline timeline of the last step, when recording (set_trace(true)).
    void set_trace(bool on) { trace_on_ = on; }
    const std::vector<pipeline::TraceRecord>& trace() const { return trace_; }
    const pipeline::Schedule& schedule() const { return schedule_; }
    int pipeline_rank() const { return pp_rank_; }
    // Bytes of activation buffers this rank holds: one micro-batch's, or what the pipeline
    // schedule made it keep at once.
    int64_t activation_bytes() const;

    void init(uint64_t seed);
    void load_hf(const std::filesystem::path& model_dir);
    void load_checkpoint(const CheckpointInfo& ck);
    // Gathers the logical tensors, one file at a time, to the writer (world rank 0 with model
    // parallelism, else dp rank 0), which writes them with save_checkpoint and returns the
    // directory (others return an empty path). Collective over the mesh.
    std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                               const nlohmann::json& state);

    // One optimizer step (1-based t) over `micro_batches` forward/backward passes; fill(m) puts
    // this rank's micro-batch m into activations().
    StepOutcome step(int64_t micro_batches, const std::function<void(int64_t)>& fill,
                     float loss_scale, const optim::OptimConfig& oc, float lr, int64_t t);

    // Mean loss over the first `batches` batches of B sequences of the file, split over the dp
    // ranks (B must be a multiple of dp * micro); the same value on every rank.
    EvalResult evaluate(const data::TokenFile& file, int64_t B, int64_t batches);

    parallel::ModelStateBytes model_state_bytes() const { return dp_.model_state_bytes(); }
    // `baseline_rss`: resident bytes before the model was allocated.
    // `micro_batches` per step (a pipeline's schedule holds several at once).
    MemoryEstimate memory_estimate(int64_t baseline_rss, int64_t micro_batches = 1) const;

  private:
    // AdamW moments <-> a buffer shaped as this rank's shard (stage 0: the whole buffer).
    void copy_moments(float* shard, bool second, bool to_shard);
    // Collective over the mesh: the whole padded buffer of dp rank 0 of every (tp, pp) position
    // into the logical model on world rank 0 (`full`, laid out as full_layout_).
    void assemble(const float* local, float* full);
    // Sums the tied embedding's gradient between the first and last pipeline stages.
    void sum_tied_embedding();
    bool model_parallel() const { return pp_ > 1 || tp_ > 1; }

    comm::Mesh& mesh_;
    int pp_, pp_rank_, tp_, tp_rank_;
    pipeline::Partition part_;
    std::unique_ptr<model::TpComm> tp_comm_;  // tp > 1
    std::unique_ptr<model::Model> model_;
    parallel::DataParallel dp_;
    std::vector<optim::AdamW> adam_;  // one per update slice
    std::unique_ptr<model::Activations> act_;
    std::unique_ptr<PipelineStage> stage_;  // pp > 1
    pipeline::Schedule schedule_;
    int64_t schedule_micro_ = 0;
    bool trace_on_ = false;
    std::vector<pipeline::TraceRecord> trace_;
};

}  // namespace weft::train
