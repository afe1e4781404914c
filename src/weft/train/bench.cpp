#include "weft/train/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/counts.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/parallel_context.hpp"
#include "weft/train/batch_split.hpp"
#include "weft/train/comm_report.hpp"
#include "weft/train/memory_fit.hpp"
#include "weft/train/options.hpp"
#include "weft/train/process.hpp"
#include "weft/train/state_checkpoint.hpp"
#include "weft/train/state_memory.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

BenchTrainResult bench_train(const BenchTrainOptions& o) {
    check_run_sizes(o.steps, o.batch_size, o.seq_len, o.threads, o.peak_gflops);
    model::ModelConfig cfg = reshaped_preset(o.preset, o.n_layer, o.n_head, o.n_embd, 0);
    // Longer sequences than the preset's positions (T = 4096 for the scaling table) get a longer
    // position table: the tokens are synthetic, and only the step's cost is measured.
    const bool raised = o.seq_len > cfg.n_positions;
    cfg.n_positions = std::max(cfg.n_positions, o.seq_len);
    cfg.validate("model '" + o.preset + "'");
    const kernels::MatmulPrecisionScope precision(kernels::parse_matmul_precision(o.dtype));
    // Collective; a world size that does not match the layout fails here on every rank.
    comm::Mesh mesh(o.layout);
    const parallel::ParallelContext ctx(mesh, o.layout, o.dtype == "bf16");
    BenchTrainResult r;
    r.layout = ctx.layout();
    const BatchSplit split = split_batch(r.layout, o.batch_size, o.micro_batch_size);
    check_sequence_split(r.layout, split.micro, o.seq_len);
    const int dp = r.layout.dp;
    r.root = mesh.world_rank() == 0;
    r.ranks = mesh.world_size();
    r.micro_batch_size = split.micro;
    r.micro_batches = split.micro_batches;
    const optim::OptimizerSpec& spec = optim::find_optimizer(o.optimizer);
    check_memory_fits({cfg,
                       r.layout,
                       split.micro,
                       split.micro_batches,
                       o.seq_len,
                       o.dtype,
                       o.grad_reduce_dtype,
                       o.bucket_mb,
                       o.optimizer,
                       0,
                       {}},
                      fmt::format("model '{}' with n_positions {}{}", o.preset, cfg.n_positions,
                                  raised ? " (from --seq-len)" : ""));
    r.threads = set_threads_per_rank(o.threads);
    r.peak_gflops = job_peak_gflops(mesh, o.peak_gflops, 1.0);
    const int64_t baseline = current_rss_bytes();
    const int64_t B = o.batch_size / dp, T = o.seq_len, micro = split.micro;

    TrainState st(cfg, ctx,
                  {r.layout.zero, o.bucket_mb, o.grad_reduce_dtype == "bf16", nullptr, o.optimizer},
                  micro, T, {o.pp_layers});
    init_state(st, 1);
    optim::OptimConfig oc;
    oc.optimizer = o.optimizer;
    oc.beta1 = spec.beta1;
    oc.beta2 = spec.beta2;
    model::Activations& act = st.activations();
    // Synthetic tokens by global row, so that every layout sees the same batch (and every rank of
    // a tensor- or pipeline-parallel group the same micro-batch); context parallel: this rank's
    // positions of each sequence, act.T of them.
    const int64_t row0 = mesh.rank(comm::Axis::dp) * B;
    auto fill = [&](int64_t m) {
        const Philox rng = philox_for(7, "bench-tokens");
        const int64_t first = (row0 + m * micro) * T, Tl = act.T;
        for (int64_t i = 0; i < micro * Tl; ++i) {
            const int64_t t = i % Tl, at = act.positions.empty() ? t : act.positions[size_t(t)];
            const uint64_t g = uint64_t(first + i / Tl * T + at);
            act.inputs[i] = int32_t(rng.uniform(2 * g) * float(cfg.vocab_size));
            act.targets[i] = int32_t(rng.uniform(2 * g + 1) * float(cfg.vocab_size));
        }
    };

    CommReport comm_report(mesh);
    std::vector<double> times;
    for (int64_t s = 0; s <= o.steps; ++s) {
        if (s == 1) {  // step 0 warms caches and oneDNN's primitive cache
            comm_report.take();
            st.dp().take_overlap_times();
            if (o.profile) kernels::profile_start();
        }
        auto t0 = std::chrono::steady_clock::now();
        st.step(split.micro_batches, fill, 1.0f / float(o.batch_size * T), oc, 1e-4f, s + 1);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) times.push_back(dt);
    }
    // The last step's parameter all-gathers (stages 1-2) belong to the timed steps.
    st.dp().settle();
    if (o.profile) r.profile = kernels::profile_stop();
    r.mean_step_s = std::accumulate(times.begin(), times.end(), 0.0) / double(times.size());
    const comm::CommStats comm = comm_report.take();
    const parallel::OverlapTimes overlap = st.dp().take_overlap_times();
    std::sort(times.begin(), times.end());
    r.step_s = times[times.size() / 2];
    r.parameters = model::num_parameters(cfg);
    r.tokens_per_s = double(o.batch_size * T) / r.step_s;
    r.flops_per_token = model::train_flops_per_token(cfg, T);
    r.achieved_gflops = r.tokens_per_s * r.flops_per_token / 1e9;
    r.mfu = r.achieved_gflops / r.peak_gflops;
    r.comm_hidden = overlap.hidden();
    r.comm_blocked_s = overlap.blocked_s / double(o.steps);
    r.comm_outstanding_s = overlap.outstanding_s / double(o.steps);
    r.comm = CommReport::to_json(comm);
    r.model_state_bytes = st.model_state_bytes().total();
    r.peak_rss = peak_rss_bytes();
    r.estimate = memory_estimate(st, baseline, split.micro_batches);
    r.estimate.checkpoint = 0;  // a benchmark writes none
    int64_t most[2] = {r.peak_rss, r.estimate.total()};
    comm::all_reduce(mesh.group(comm::Axis::world), std::span<int64_t>(most), comm::ReduceOp::max);
    r.peak_rss_max = most[0], r.estimate_max = most[1];
    r.n_positions = cfg.n_positions;
    r.bf16_scratch_bytes = kernels::matmul_bf16_scratch_bytes();
    return r;
}

namespace {
// Seconds per timed step of the kernels' outermost calls.
double profiled_total(const BenchTrainResult& r) {
    double total = 0;
    for (const kernels::ProfileEntry& e : r.profile) total += e.seconds;
    return total;
}
}  // namespace

nlohmann::json profile_json(const BenchTrainResult& r, int64_t steps) {
    const double n = double(steps), step_ms = 1e3 * r.mean_step_s;
    nlohmann::json kernels = nlohmann::json::array(), nested = nlohmann::json::array();
    for (const kernels::ProfileEntry& e : r.profile) {
        if (e.seconds > 0)
            kernels.push_back({{"name", e.name},
                               {"ms", 1e3 * e.seconds / n},
                               {"share", 1e3 * e.seconds / n / step_ms},
                               {"calls", double(e.calls) / n}});
        if (e.nested_seconds > 0)
            nested.push_back({{"name", e.name},
                              {"ms", 1e3 * e.nested_seconds / n},
                              {"share", 1e3 * e.nested_seconds / n / step_ms}});
    }
    const double other_ms = step_ms - 1e3 * profiled_total(r) / n;
    return {{"step_ms", step_ms},
            {"kernels", kernels},
            {"other_ms", other_ms},
            {"other_share", other_ms / step_ms},
            {"nested", nested}};
}

std::string profile_table(const BenchTrainResult& r, int64_t steps) {
    const double n = double(steps), step_ms = 1e3 * r.mean_step_s;
    std::string out =
        fmt::format("{:<16} {:>10} {:>7} {:>11}\n", "kernel", "ms/step", "%", "calls/step");
    auto row = [&](const std::string& name, double ms, double calls) {
        out += fmt::format("{:<16} {:>10.1f} {:>6.1f}% {:>11.0f}\n", name, ms, 100 * ms / step_ms,
                           calls);
    };
    for (const kernels::ProfileEntry& e : r.profile)
        if (e.seconds > 0) row(e.name, 1e3 * e.seconds / n, double(e.calls) / n);
    // Whatever no kernel hook covers: the optimizer's bookkeeping outside adamw, waiting for
    // communication, gradient zeroing, the loss sum, allocation.
    out += fmt::format("{:<16} {:>10.1f} {:>6.1f}%\n", "other/comm",
                       step_ms - 1e3 * profiled_total(r) / n,
                       100 * (1 - 1e3 * profiled_total(r) / n / step_ms));
    out += fmt::format("{:<16} {:>10.1f} {:>6.1f}%  (mean of {} timed steps)\n", "step", step_ms,
                       100.0, steps);
    bool header = false;
    for (const kernels::ProfileEntry& e : r.profile) {
        if (e.nested_seconds <= 0) continue;
        if (!header) out += "inside the rows above:\n";
        header = true;
        out += fmt::format("  {:<14} {:>10.1f} {:>6.1f}%\n", e.name, 1e3 * e.nested_seconds / n,
                           100 * 1e3 * e.nested_seconds / n / step_ms);
    }
    return out;
}

}  // namespace weft::train
