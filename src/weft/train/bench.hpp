#pragma once
// `weft bench train`: full training steps (forward, backward, clipping, AdamW) of a model on
// synthetic tokens, timed, with model FLOP/s against the measured GEMM peak and peak memory
// against the analytic estimate.
#include <cstdint>
#include <string>

#include "weft/train/memory.hpp"

namespace weft::train {

struct BenchTrainOptions {
    std::string preset = "gpt2";
    int64_t batch_size = 4;
    int64_t seq_len = 1024;
    int64_t steps = 5;       // timed steps, after one warm-up step
    double peak_gflops = 0;  // 0: measure
};

struct BenchTrainResult {
    int64_t parameters = 0;
    double step_s = 0;  // median of the timed steps
    double tokens_per_s = 0;
    double flops_per_token = 0;
    double achieved_gflops = 0;
    double peak_gflops = 0;
    double mfu = 0;
    int64_t peak_rss = 0;
    MemoryEstimate estimate;
    int threads = 0;
};

BenchTrainResult bench_train(const BenchTrainOptions& o);

}  // namespace weft::train
