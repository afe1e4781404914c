#include "weft/train/bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/gpt2.hpp"
#include "weft/optim/optimizer.hpp"

namespace weft::train {

BenchTrainResult bench_train(const BenchTrainOptions& o) {
    WEFT_CHECK(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
    WEFT_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got {}", o.batch_size);
    model::ModelConfig cfg = model::model_preset(o.preset);
    WEFT_CHECK(o.seq_len >= 1 && o.seq_len <= cfg.n_positions,
               "--seq-len must be in [1, {}] for {}, got {}", cfg.n_positions, o.preset, o.seq_len);
    BenchTrainResult r;
    r.threads = omp_get_max_threads();
    r.peak_gflops =
        o.peak_gflops > 0 ? o.peak_gflops : kernels::measure_gemm_peak_gflops(2048, 2.0);
    const int64_t baseline = current_rss_bytes();
    const int64_t B = o.batch_size, T = o.seq_len;

    model::Gpt2 model(cfg);
    const auto& layout = model.layout();
    Buffer params(layout.total), grads(layout.total);
    model::init_params(params.data(), layout, 1);
    optim::AdamW adam(layout, 0, layout.total);
    optim::OptimConfig oc;
    model::Activations act(cfg, B, T);
    model::FlatAccess access(layout, params.data(), grads.data());
    Philox rng = philox_for(7, "bench-tokens");
    for (int64_t i = 0; i < B * T; ++i) {
        act.inputs[i] = int32_t(rng.uniform(uint64_t(2 * i)) * float(cfg.vocab_size));
        act.targets[i] = int32_t(rng.uniform(uint64_t(2 * i + 1)) * float(cfg.vocab_size));
    }

    std::vector<double> times;
    for (int64_t s = 0; s <= o.steps; ++s) {
        auto t0 = std::chrono::steady_clock::now();
        grads.zero();
        model.forward(act, access, true, 1.0f / float(B * T));
        model.backward(act, access);
        double norm = std::sqrt(kernels::sum_squares(grads.data(), grads.size()));
        adam.step(params.data(), grads.data(), oc, 1e-4f, optim::clip_scale(oc, norm), s + 1);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) times.push_back(dt);  // step 0 warms caches and oneDNN's primitive cache
    }
    std::sort(times.begin(), times.end());
    r.step_s = times[times.size() / 2];
    r.parameters = cfg.num_parameters();
    r.tokens_per_s = double(B * T) / r.step_s;
    r.flops_per_token = cfg.train_flops_per_token(T);
    r.achieved_gflops = r.tokens_per_s * r.flops_per_token / 1e9;
    r.mfu = r.achieved_gflops / r.peak_gflops;
    r.peak_rss = peak_rss_bytes();
    r.estimate = estimate_memory(cfg, layout.total, B, T, baseline);
    return r;
}

}  // namespace weft::train
