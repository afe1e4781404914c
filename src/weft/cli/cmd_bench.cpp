#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/train/bench.hpp"

namespace weft::cli {

namespace {
struct PeakArgs {
    int64_t size = 2048;
    double seconds = 3;
    bool json = false;
};
struct TrainArgs {
    train::BenchTrainOptions o;
    bool json = false;
};
double mib(int64_t b) {
    return double(b) / (1 << 20);
}
}  // namespace

void add_bench_command(CLI::App& app) {
    CLI::App* c = app.add_subcommand("bench", "Measure this machine and the engine");
    c->require_subcommand(1);

    auto p = std::make_shared<PeakArgs>();
    CLI::App* peak = c->add_subcommand("peak", "Large-GEMM GFLOP/s of this machine (fp32, oneDNN)");
    peak->add_option("--size", p->size, "n of the n x n x n product")->capture_default_str();
    peak->add_option("--seconds", p->seconds, "How long to measure")->capture_default_str();
    peak->add_flag("--json", p->json, "Print one JSON object");
    peak->callback([p] {
        double g = kernels::measure_gemm_peak_gflops(p->size, p->seconds);
        if (p->json)
            fmt::print("{{\"fp32_gflops\": {:.1f}, \"size\": {}, \"threads\": {}}}\n", g, p->size,
                       omp_get_max_threads());
        else
            fmt::print("fp32 GEMM peak: {:.1f} GFLOP/s ({}^3, {} threads)\n", g, p->size,
                       omp_get_max_threads());
    });

    auto t = std::make_shared<TrainArgs>();
    CLI::App* tr = c->add_subcommand("train", "Time full training steps on synthetic tokens");
    tr->add_option("--preset", t->o.preset, "Model preset")->capture_default_str();
    tr->add_option("--batch-size", t->o.batch_size, "Sequences per step")->capture_default_str();
    tr->add_option("--seq-len", t->o.seq_len, "Tokens per sequence")->capture_default_str();
    tr->add_option("--steps", t->o.steps, "Timed steps (after one warm-up)")->capture_default_str();
    tr->add_option("--peak-gflops", t->o.peak_gflops, "Peak for MFU (0: measure)")
        ->capture_default_str();
    tr->add_flag("--json", t->json, "Print one JSON object");
    tr->callback([t] {
        train::BenchTrainResult r = train::bench_train(t->o);
        if (t->json) {
            fmt::print(
                "{{\"preset\": \"{}\", \"batch_size\": {}, \"seq_len\": {}, \"threads\": {}, "
                "\"step_s\": {:.4f}, \"tokens_per_s\": {:.1f}, \"achieved_gflops\": {:.1f}, "
                "\"peak_gflops\": {:.1f}, \"mfu\": {:.4f}, \"peak_rss_bytes\": {}, "
                "\"estimate_bytes\": {}}}\n",
                t->o.preset, t->o.batch_size, t->o.seq_len, r.threads, r.step_s, r.tokens_per_s,
                r.achieved_gflops, r.peak_gflops, r.mfu, r.peak_rss, r.estimate.total());
            return;
        }
        fmt::print("model        {} ({} parameters), batch {} x {} tokens, {} threads\n",
                   t->o.preset, r.parameters, t->o.batch_size, t->o.seq_len, r.threads);
        fmt::print("step         {:.3f} s (median of {})\n", r.step_s, t->o.steps);
        fmt::print("throughput   {:.0f} tokens/s\n", r.tokens_per_s);
        fmt::print(
            "model FLOPs  {:.1f} GFLOP/s = {:.3g} FLOP/token x tokens/s "
            "(6 x parameters + 6 x layers x T x width)\n",
            r.achieved_gflops, r.flops_per_token);
        fmt::print("MFU          {:.1f}% of the measured fp32 GEMM peak {:.1f} GFLOP/s\n",
                   100 * r.mfu, r.peak_gflops);
        fmt::print("memory       peak resident {:.1f} MiB; estimate {:.1f} MiB ({:+.1f}%)\n",
                   mib(r.peak_rss), mib(r.estimate.total()),
                   100.0 * (double(r.peak_rss) / double(r.estimate.total()) - 1));
        fmt::print("             {}\n", r.estimate.describe());
    });
}

}  // namespace weft::cli
