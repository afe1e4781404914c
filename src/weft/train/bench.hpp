#pragma once
// `weft bench train`: full training steps (forward, backward, clipping, AdamW) of a model on
// synthetic tokens, timed, with model FLOP/s against the measured GEMM peak and peak memory
// against the analytic estimate. Under mpirun it runs any layout `weft train` runs (data
// parallel with any ZeRO stage, tensor, sequence and pipeline parallel), the batch being the
// global one, so one process and N ranks time the same work.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/core/layout.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/train/memory.hpp"

namespace weft::train {

struct BenchTrainOptions {
    std::string preset = "gpt2";
    int64_t n_layer = 0, n_head = 0, n_embd = 0;  // 0: the preset's
    int64_t batch_size = 4;                       // global: sequences per step over all ranks
    int64_t micro_batch_size = 0;                 // 0: batch_size / dp
    int64_t seq_len = 1024;
    int64_t steps = 5;       // timed steps, after one warm-up step
    double peak_gflops = 0;  // per rank; 0: measure
    Layout layout;           // dp 0: the world size over the other degrees
    std::string pp_layers;   // as `weft train --pp-layers`
    double bucket_mb = 25;
    int threads = 0;  // per rank; 0: as `weft train` chooses
    // Precision of the matrix products (kernels/matmul.hpp): fp32 or bf16. MFU is taken against
    // the GEMM peak of the same precision.
    std::string dtype = "fp32";
    // Data-parallel gradient reduction on the wire, as `weft train --grad-reduce-dtype`.
    std::string grad_reduce_dtype = "fp32";
    bool profile = false;             // time every kernel of the timed steps (rank 0's main thread)
    std::string optimizer = "adamw";  // optim/registry.hpp, with its default betas
};

struct BenchTrainResult {
    bool root = true;                                 // world rank 0, which prints
    int ranks = 1;                                    // world size
    Layout layout;                                    // resolved
    int64_t micro_batch_size = 0, micro_batches = 0;  // per rank and step
    int64_t parameters = 0;
    double step_s = 0;  // median of the timed steps
    double tokens_per_s = 0;
    double flops_per_token = 0;
    double achieved_gflops = 0;
    double peak_gflops = 0;  // of the whole job
    double mfu = 0;
    double comm_hidden = 1;  // share of communication time hidden behind compute
    double comm_blocked_s = 0, comm_outstanding_s = 0;  // per timed step
    nlohmann::json comm;  // rank 0's communication over the timed steps, groups of > 1 rank
    int64_t model_state_bytes = 0;  // per rank
    int64_t peak_rss = 0;           // of rank 0
    MemoryEstimate estimate;        // of rank 0 (no checkpoint is written)
    // The largest over the ranks: pipeline stages and tensor-parallel ranks differ.
    int64_t peak_rss_max = 0, estimate_max = 0;
    int threads = 0;                 // per rank
    int64_t n_positions = 0;         // of the model benched (raised to --seq-len if shorter)
    int64_t bf16_scratch_bytes = 0;  // bf16 product scratch held after the run (not estimated)
    double mean_step_s = 0;          // the profile's denominator
    std::vector<kernels::ProfileEntry> profile;  // summed over the timed steps
};

// The profile as {"step_ms", "kernels": [{"name", "ms", "share", "calls"} per step ...],
// "other_ms", "other_share", "nested": [...]}, per timed step.
nlohmann::json profile_json(const BenchTrainResult& r, int64_t steps);
// The same as an aligned text table.
std::string profile_table(const BenchTrainResult& r, int64_t steps);

BenchTrainResult bench_train(const BenchTrainOptions& o);

}  // namespace weft::train
