#include "weft/train/bench.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/train/comm_report.hpp"
#include "weft/train/process.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

BenchTrainResult bench_train(const BenchTrainOptions& o) {
    WEFT_CHECK(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
    WEFT_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got {}", o.batch_size);
    model::ModelConfig cfg = model::model_preset(o.preset);
    WEFT_CHECK(o.seq_len >= 1 && o.seq_len <= cfg.n_positions,
               "--seq-len must be in [1, {}] for {}, got {}", cfg.n_positions, o.preset, o.seq_len);
    Layout layout;
    layout.zero = o.zero;
    comm::Mesh mesh(layout);
    const int dp = mesh.size(comm::Axis::dp);
    WEFT_CHECK(o.batch_size % dp == 0,
               "--batch-size {} is not divisible by the {} data-parallel ranks", o.batch_size, dp);
    BenchTrainResult r;
    r.root = mesh.world_rank() == 0;
    r.ranks = dp;
    r.threads = set_threads_per_rank(o.threads);
    r.peak_gflops = job_peak_gflops(mesh, o.peak_gflops, 2048, 2.0);
    const int64_t baseline = current_rss_bytes();
    const int64_t B = o.batch_size / dp, T = o.seq_len;

    TrainState st(cfg, mesh.group(comm::Axis::dp), {o.zero, o.bucket_mb}, B, T);
    st.init(1);
    optim::OptimConfig oc;
    model::Activations& act = st.activations();
    // Synthetic tokens by global row, so that every layout sees the same batch.
    Philox rng = philox_for(7, "bench-tokens");
    const int64_t row0 = mesh.rank(comm::Axis::dp) * B;
    for (int64_t i = 0; i < B * T; ++i) {
        const uint64_t g = uint64_t(row0 * T + i);
        act.inputs[i] = int32_t(rng.uniform(2 * g) * float(cfg.vocab_size));
        act.targets[i] = int32_t(rng.uniform(2 * g + 1) * float(cfg.vocab_size));
    }

    CommReport comm_report(mesh);
    std::vector<double> times;
    for (int64_t s = 0; s <= o.steps; ++s) {
        if (s == 1) {  // step 0 warms caches and oneDNN's primitive cache
            comm_report.take();
            st.dp().take_overlap_times();
        }
        auto t0 = std::chrono::steady_clock::now();
        st.step(
            1, [](int64_t) {}, 1.0f / float(o.batch_size * T), oc, 1e-4f, s + 1);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) times.push_back(dt);
    }
    // The last step's parameter all-gathers (stages 1-2) belong to the timed steps.
    st.dp().settle();
    const comm::CommStats comm = comm_report.take();
    const parallel::OverlapTimes overlap = st.dp().take_overlap_times();
    std::sort(times.begin(), times.end());
    r.step_s = times[times.size() / 2];
    r.parameters = cfg.num_parameters();
    r.tokens_per_s = double(o.batch_size * T) / r.step_s;
    r.flops_per_token = cfg.train_flops_per_token(T);
    r.achieved_gflops = r.tokens_per_s * r.flops_per_token / 1e9;
    r.mfu = r.achieved_gflops / r.peak_gflops;
    r.comm_hidden = overlap.hidden();
    r.comm_blocked_s = overlap.blocked_s / double(o.steps);
    r.comm_outstanding_s = overlap.outstanding_s / double(o.steps);
    r.comm = CommReport::to_json(comm);
    r.model_state_bytes = st.model_state_bytes().total();
    r.peak_rss = peak_rss_bytes();
    r.estimate = st.memory_estimate(baseline);
    return r;
}

}  // namespace weft::train
