#pragma once
// A data-parallel rank's model, its share of the training state (parameters, gradients and
// AdamW moments as its ZeRO stage keeps them) and one optimizer step: what `weft train` and
// `weft bench train` run. Every call is collective over the dp group.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/data/token_file.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/parallel/data_parallel.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/evaluate.hpp"
#include "weft/train/memory.hpp"

namespace weft::train {

struct StepOutcome {
    double loss_sum = 0;   // over the global batch (every rank's tokens)
    double grad_norm = 0;  // of the whole reduced gradient, before clipping
};

class TrainState {
  public:
    // `micro` sequences of T tokens per forward pass.
    TrainState(const model::ModelConfig& cfg, comm::Group& dp,
               parallel::DataParallelOptions options, int64_t micro, int64_t T);

    parallel::DataParallel& dp() { return dp_; }
    model::Activations& activations() { return act_; }

    void init(uint64_t seed);
    void load_hf(const std::filesystem::path& model_dir);
    void load_checkpoint(const CheckpointInfo& ck);
    // Gathers the logical tensors to dp rank 0, which writes them with save_checkpoint and
    // returns the directory (others return an empty path).
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
    MemoryEstimate memory_estimate(int64_t baseline_rss) const;

  private:
    // AdamW moments <-> a buffer shaped as this rank's shard (stage 0: the whole buffer).
    void copy_moments(float* shard, bool second, bool to_shard);

    model::Gpt2 model_;
    parallel::DataParallel dp_;
    std::vector<optim::AdamW> adam_;  // one per update slice
    model::Activations act_;
};

}  // namespace weft::train
