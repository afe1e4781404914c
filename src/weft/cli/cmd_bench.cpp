#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "weft/cli/commands.hpp"
#include "weft/cli/layout_options.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/core_handoff.hpp"
#include "weft/kernels/gemm_peak.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/matmul_rows_bench.hpp"
#include "weft/kernels/memory_bandwidth.hpp"
#include "weft/model/config.hpp"
#include "weft/optim/registry.hpp"
#include "weft/serve/bench_client.hpp"
#include "weft/train/bench.hpp"

namespace weft::cli {

namespace {
struct PeakArgs {
    std::vector<int64_t> sizes{std::begin(kernels::kPeakSizes), std::end(kernels::kPeakSizes)};
    double seconds = 3;
    std::string dtype = "both";
    bool json = false;
};
struct RowsArgs {
    kernels::RowsBenchShape shape;
    std::vector<int64_t> rows{1, 4, 16, 64, 512};
    std::string dtype = "both";
    double seconds = 1;
    double bandwidth_gbs = 0, fp32_peak = 0, bf16_peak = 0;  // 0: measure
};
struct BandwidthArgs {
    double seconds = 1;
    bool each_line = false;
};
struct HandoffArgs {
    int passes = 20000, runs = 5;
};
struct TrainArgs {
    train::BenchTrainOptions o;
    bool json = false;
};
struct ServeArgs {
    serve::BenchServeOptions o;
    std::string rate = "inf";
    std::filesystem::path json;
};
// --rate: requests/s, or inf. A string flag, as the float flags refuse inf.
double parse_rate(const std::string& s) {
    if (s == "inf") return std::numeric_limits<double>::infinity();
    double r = 0;
    size_t used = 0;
    try {
        r = std::stod(s, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    WEFT_CHECK(used == s.size() && std::isfinite(r) && r > 0,
               "--rate must be positive requests/s or inf (all at once), got '{}'", s);
    return r;
}
double mib(int64_t b) {
    return double(b) / (1 << 20);
}
}  // namespace

void add_bench_command(CLI::App& app) {
    CLI::App* c = app.add_subcommand("bench", "Measure this machine and the engine");
    c->require_subcommand(1);

    auto p = std::make_shared<PeakArgs>();
    CLI::App* peak = c->add_subcommand(
        "peak",
        "Large-GEMM GFLOP/s of this machine (oneDNN): fp32, and bf16 inputs with fp32 "
        "accumulation");
    peak->add_option("--size", p->sizes,
                     "n of the n x n x n products; the peak is the best of them (oneDNN's bf16 "
                     "product peaks at a smaller n than the fp32 one)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 15))
        ->capture_default_str();
    peak->add_option("--seconds", p->seconds, "How long to measure each dtype at each size")
        ->check(CLI::Range(0.001, 3600.0))
        ->capture_default_str();
    peak->add_option("--dtype", p->dtype, "fp32, bf16 or both")
        ->check(CLI::IsMember({"fp32", "bf16", "both"}))
        ->capture_default_str();
    peak->add_flag("--json", p->json, "Print one JSON object");
    peak->callback([p] {
        const bool fp32 = p->dtype != "bf16", bf16 = p->dtype != "fp32";
        const int n = int(p->sizes.size());
        const kernels::PeakMeasure f =
            fp32 ? kernels::measure_best_peak(false, p->seconds, p->sizes.data(), n)
                 : kernels::PeakMeasure{};
        const kernels::PeakMeasure h =
            bf16 ? kernels::measure_best_peak(true, p->seconds, p->sizes.data(), n)
                 : kernels::PeakMeasure{};
        const int threads = omp_get_max_threads();
        if (p->json) {
            std::string fields;
            if (fp32)
                fields +=
                    fmt::format("\"fp32_gflops\": {:.1f}, \"fp32_size\": {}, ", f.gflops, f.size);
            if (bf16)
                fields +=
                    fmt::format("\"bf16_gflops\": {:.1f}, \"bf16_size\": {}, \"bf16_native\": {}, ",
                                h.gflops, h.size, kernels::bf16_products_native());
            fmt::print("{{{}\"sizes\": [{}], \"threads\": {}}}\n", fields,
                       fmt::join(p->sizes, ", "), threads);
            return;
        }
        const std::string of = fmt::format("best of n = {}", fmt::join(p->sizes, ", "));
        if (fp32)
            fmt::print("fp32 GEMM peak: {:.1f} GFLOP/s (n = {}, {}; {} threads)\n", f.gflops,
                       f.size, of, threads);
        if (bf16)
            fmt::print(
                "bf16 GEMM peak: {:.1f} GFLOP/s (n = {}, {}; {} threads, fp32 accumulation{})\n",
                h.gflops, h.size, of, threads,
                kernels::bf16_products_native()
                    ? ""
                    : "; emulated on the fp32 units: this CPU has neither AVX512-BF16 "
                      "nor AMX");
    });

    auto r = std::make_shared<RowsArgs>();
    CLI::App* rows = c->add_subcommand(
        "rows",
        "Serving's row-invariant products (matmul_rows, fp32 and bf16) over a model's linear "
        "layers, M rows at a time: GFLOP/s against the GEMM peak, weight GB/s against the memory "
        "bandwidth");
    rows->add_option("--rows", r->rows, "The M values: rows (tokens) multiplied at once")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 14))
        ->capture_default_str();
    rows->add_option("--dtype", r->dtype, "fp32, bf16 or both")
        ->check(CLI::IsMember({"fp32", "bf16", "both"}))
        ->capture_default_str();
    rows->add_option("--seconds", r->seconds, "How long to time each M (best pass counts)")
        ->check(CLI::Range(0.001, 3600.0))
        ->capture_default_str();
    rows->add_option("--n-layer", r->shape.n_layer, "Layers (the defaults: SmolLM-135M's shapes)")
        ->check(CLI::Range(int64_t(1), int64_t(1000)))
        ->capture_default_str();
    rows->add_option("--n-embd", r->shape.n_embd, "Width C: q and o are C x C")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
        ->capture_default_str();
    rows->add_option("--kv-dim", r->shape.kv_dim, "Rows of k and v (kv heads x head width)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
        ->capture_default_str();
    rows->add_option("--hidden", r->shape.hidden, "Rows of gate and up, columns of down")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 18))
        ->capture_default_str();
    rows->add_option("--vocab", r->shape.vocab, "Rows of the head")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    rows->add_option("--bandwidth-gbs", r->bandwidth_gbs,
                     "Memory bandwidth to compare against, GB/s (0: measure, as weft profile)")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    rows->add_option("--fp32-peak", r->fp32_peak,
                     "fp32 GEMM peak to compare against, GFLOP/s (0: measure, as weft bench peak)")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    rows->add_option("--bf16-peak", r->bf16_peak,
                     "bf16 GEMM peak to compare against, GFLOP/s (0: measure, as weft bench peak)")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    rows->callback([r] {
        std::vector<std::string> dtypes;
        if (r->dtype != "bf16") dtypes.push_back("fp32");
        if (r->dtype != "fp32") dtypes.push_back("bf16");
        double peak[2] = {r->fp32_peak, r->bf16_peak};  // fp32, bf16
        for (const std::string& d : dtypes)
            if (peak[d == "bf16"] == 0)
                peak[d == "bf16"] = kernels::measure_best_peak(d == "bf16", 0.5).gflops;
        // Unless given, the bandwidth is measured between the passes, each point against the
        // best triad of its own seconds: this host's moves by 40% from one few seconds to the
        // next, and a bound taken before the passes can be below what they then read.
        std::optional<kernels::BandwidthProbe> probe;
        if (r->bandwidth_gbs == 0) probe.emplace();
        const std::vector<kernels::RowsBenchPoint> points = kernels::bench_matmul_rows(
            r->shape, dtypes, r->rows, r->seconds, probe ? &*probe : nullptr);
        auto bandwidth_of = [&](const kernels::RowsBenchPoint& p) {
            return probe ? p.bandwidth : r->bandwidth_gbs * 1e9;
        };
        double bandwidth = 0;
        for (const kernels::RowsBenchPoint& p : points)
            bandwidth = std::max(bandwidth, bandwidth_of(p));
        const kernels::RowsBenchShape& s = r->shape;
        fmt::print(
            "matmul_rows over {} layers of (qkv, o, gate-up, down) + head: C {}, kv {}, "
            "hidden {}, vocab {}; {:.1f}M weights; {} threads\n",
            s.n_layer, s.n_embd, s.kv_dim, s.hidden, s.vocab,
            points.front().weight_bytes / (points.front().dtype == "fp32" ? 4 : 2) / 1e6,
            omp_get_max_threads());
        fmt::print("memory bandwidth {:.1f} GB/s{}", bandwidth / 1e9,
                   r->bandwidth_gbs > 0
                       ? " (given)"
                       : " (triad as weft profile, best between the passes; each row's % bw is "
                         "of its own passes' best)");
        for (const std::string& d : dtypes)
            fmt::print("; {} GEMM peak {:.0f} GFLOP/s{}", d, peak[d == "bf16"],
                       (d == "bf16" ? r->bf16_peak : r->fp32_peak) > 0 ? " (given)"
                                                                       : " (as weft bench peak)");
        fmt::print("\n");
        fmt::print("{:<6}{:>6}{:>10}{:>10}{:>10}{:>10}{:>8}{:>10}{:>8}{:>8}{:>8}\n", "dtype", "M",
                   "ms/pass", "CPU ms", "tokens/s", "GFLOP/s", "% peak", "GB/s", "bw", "% bw",
                   "x M=1");
        // Tokens/s against M = 1's of the same dtype: what batching the rows buys.
        std::map<std::string, double> single;
        for (const kernels::RowsBenchPoint& p : points)
            if (p.rows == 1) single[p.dtype] = 1 / p.seconds;
        for (const kernels::RowsBenchPoint& p : points) {
            const double gflops = p.flops / p.seconds / 1e9, gbs = p.weight_bytes / p.seconds / 1e9;
            const double tokens = double(p.rows) / p.seconds;
            const auto one = single.find(p.dtype);
            fmt::print(
                "{:<6}{:>6}{:>10.2f}{:>10.2f}{:>10.0f}{:>10.1f}{:>7.1f}%{:>10.1f}{:>8.1f}{:>7."
                "1f}%{:>8}\n",
                p.dtype, p.rows, 1e3 * p.seconds, 1e3 * p.cpu_seconds, tokens, gflops,
                100 * gflops / peak[p.dtype == "bf16"], gbs, bandwidth_of(p) / 1e9,
                100 * gbs * 1e9 / bandwidth_of(p),
                one == single.end() ? "-" : fmt::format("{:.1f}x", tokens / one->second));
        }
    });

    auto bw = std::make_shared<BandwidthArgs>();
    CLI::App* band = c->add_subcommand(
        "bandwidth",
        "Memory bandwidth: the triad weft profile and weft bench rows take as the bound of "
        "reading the weights, GB/s counting the three arrays' bytes");
    band->add_option("--seconds", bw->seconds, "How long to measure (the best pass counts)")
        ->check(CLI::Range(0.001, 3600.0))
        ->capture_default_str();
    band->add_flag(
        "--each-line", bw->each_line,
        "Measure once per line read on standard input, printing GB/s alone, until its end: "
        "scripts that probe between other work keep one process and its buffers (a process a "
        "probe allocates and frees them each time, and a virtual machine that reports freed "
        "memory to its host slows what runs next)");
    band->callback([bw] {
        kernels::BandwidthProbe probe;
        if (!bw->each_line) {
            fmt::print("memory bandwidth {:.1f} GB/s (triad, best of {} s; {} threads)\n",
                       probe.best(bw->seconds) / 1e9, bw->seconds, omp_get_max_threads());
            return;
        }
        for (std::string line; std::getline(std::cin, line);) {
            fmt::print("{:.1f}\n", probe.best(bw->seconds) / 1e9);
            std::fflush(stdout);
        }
    });

    auto ho = std::make_shared<HandoffArgs>();
    CLI::App* hand = c->add_subcommand(
        "handoff",
        "How long a cache line written on one core takes to reach another, ns one way, from the "
        "first CPU this process may run on to each other one: what threads sharing a product's "
        "input and output pay (a virtual machine's two cores on one core complex or on two)");
    hand->add_option("--passes", ho->passes, "Round trips a run")
        ->check(CLI::Range(1, 100000000))
        ->capture_default_str();
    hand->add_option("--runs", ho->runs, "Runs a pair (the median is printed)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    hand->callback([ho] {
        const std::vector<int> cpus = kernels::allowed_cpus();
        if (cpus.size() < 2) {
            fmt::print("one CPU ({}): no handoff between cores to measure\n", cpus.front());
            return;
        }
        for (size_t i = 1; i < cpus.size(); ++i) {
            std::vector<double> ns;
            for (int r = 0; r < ho->runs; ++r)
                ns.push_back(kernels::core_handoff_ns(cpus[0], cpus[i], ho->passes));
            std::sort(ns.begin(), ns.end());
            fmt::print(
                "core handoff {:.0f} ns (CPU {} to {}, one way; median of {} runs of {} "
                "round trips)\n",
                ns[ns.size() / 2], cpus[0], cpus[i], ho->runs, ho->passes);
        }
    });

    auto sv = std::make_shared<ServeArgs>();
    CLI::App* bs = c->add_subcommand(
        "serve",
        "Load an OpenAI-compatible server (weft serve, llama.cpp, vLLM) with streaming "
        "completions at Poisson arrivals: throughput, TTFT, TPOT, ITL, goodput");
    bs->add_option("--url", sv->o.url, "The server, http://HOST:PORT")->required();
    bs->add_option("--requests", sv->o.requests, "Requests to send")->required();
    bs->add_option("--rate", sv->rate, "Mean arrivals per second (Poisson), or inf: all at once")
        ->capture_default_str();
    bs->add_option("--max-concurrency", sv->o.max_concurrency,
                   "Requests in flight at most (0: no limit but 256, one client thread each)")
        ->capture_default_str();
    bs->add_option("--prompt-len", sv->o.prompt_len, "Prompt tokens (random ids) per request")
        ->required();
    bs->add_flag("--text-prompt", sv->o.text_prompt,
                 "Prompts of --prompt-len common words (about that many tokens; the server's "
                 "usage counts them) instead of token ids");
    bs->add_option("--output-len", sv->o.output_len,
                   "max_tokens per request (weft ends earlier at end of text; the counts are the "
                   "server's usage)")
        ->required();
    bs->add_option("--temperature", sv->o.temperature,
                   "Every request's sampling temperature, as OpenAI's API takes it (0: greedy; "
                   "a sampled token costs the server a draw over the whole vocabulary)")
        ->check(CLI::Range(0.0, 2.0))
        ->capture_default_str();
    bs->add_option("--seed", sv->o.seed, "Seed of the prompts and the arrival times")
        ->capture_default_str();
    bs->add_option("--api-key", sv->o.api_key, "Sent as Authorization: Bearer KEY");
    bs->add_option("--model", sv->o.model, "The request's model (default: the server's first)");
    bs->add_option("--ttft-slo-ms", sv->o.ttft_slo_ms,
                   "Goodput counts requests with time to first token at most this");
    bs->add_option("--tpot-slo-ms", sv->o.tpot_slo_ms,
                   "Goodput counts requests with time per output token at most this");
    bs->add_option("--timeout", sv->o.timeout_s, "Seconds one request may take")
        ->capture_default_str();
    bs->add_option("--json", sv->json, "Also write the figures as one JSON object to this file");
    bs->callback([sv] {
        sv->o.rate = parse_rate(sv->rate);
        check_output_paths({{sv->json, "--json", false}});
        const serve::BenchServeReport r = serve::bench_serve(sv->o);
        const nlohmann::json j = serve::report_json(r);
        fmt::print("{}", serve::report_table(j));
        if (!sv->json.empty()) {
            std::ofstream f(sv->json);
            f << j.dump(2) << "\n";
            WEFT_CHECK(f.good(), "cannot write --json {}", sv->json.string());
        }
        WEFT_CHECK(j["successful_requests"].get<int64_t>() > 0,
                   "all {} requests to {} failed; the first: {}", sv->o.requests, sv->o.url,
                   j["errors"].empty() ? "" : j["errors"][0].get<std::string>());
    });

    auto t = std::make_shared<TrainArgs>();
    CLI::App* tr = c->add_subcommand("train", "Time full training steps on synthetic tokens");
    tr->add_option("--preset", t->o.preset,
                   fmt::format("Model preset: {}", fmt::join(model::model_preset_names(), ", ")))
        ->capture_default_str();
    add_shape_options(tr, {&t->o.n_layer, &t->o.n_head, &t->o.n_embd});
    tr->add_option("--batch-size", t->o.batch_size,
                   "Sequences per step, over all ranks under mpirun (the global batch)")
        ->capture_default_str();
    tr->add_option("--seq-len", t->o.seq_len, "Tokens per sequence")->capture_default_str();
    tr->add_option("--steps", t->o.steps, "Timed steps (after one warm-up)")->capture_default_str();
    tr->add_option("--peak-gflops", t->o.peak_gflops, "Peak of one rank for MFU (0: measure)")
        ->capture_default_str();
    add_layout_options(tr, t->o.layout, t->o.pp_layers, t->o.micro_batch_size);
    tr->add_option("--bucket-mb", t->o.bucket_mb, "Gradient bucket size, MiB")
        ->capture_default_str();
    tr->add_option("--threads", t->o.threads,
                   "OpenMP threads per rank (0: OMP_NUM_THREADS, else cores / ranks on the node)")
        ->capture_default_str();
    tr->add_option("--dtype", t->o.dtype,
                   "Precision of the matrix products: fp32, or bf16 (inputs rounded to bf16, fp32 "
                   "accumulation, fp32 weights and optimizer); MFU is against that dtype's peak")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    tr->add_option("--grad-reduce-dtype", t->o.grad_reduce_dtype,
                   "Data-parallel gradient reduction on the wire: fp32, or bf16 (summed in fp32 "
                   "on the receiving rank)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    tr->add_option("--optimizer", t->o.optimizer,
                   fmt::format("Optimizer: {} (with its default betas)", optim::optimizer_names()))
        ->capture_default_str();
    tr->add_flag("--profile", t->o.profile,
                 "Time every kernel of the timed steps and print a per-kernel breakdown");
    tr->add_flag("--json", t->json, "Print one JSON object");
    group_options(tr, "Model", {"--preset", "--n-layer", "--n-head", "--n-embd"});
    group_options(tr, "Batch and timing",
                  {"--batch-size", "--seq-len", "--steps", "--peak-gflops", "--threads"});
    group_options(tr, "Communication and precision",
                  {"--bucket-mb", "--dtype", "--grad-reduce-dtype", "--optimizer"});
    group_options(tr, "Output", {"--profile", "--json"});
    tr->callback([t] {
        check_layout_supported(t->o.layout, /*context_parallel=*/true);
        train::BenchTrainResult r = train::bench_train(t->o);
        if (!r.root) return;
        if (t->json) {
            nlohmann::json j = {{"preset", t->o.preset},
                                {"parameters", r.parameters},
                                {"batch_size", t->o.batch_size},
                                {"seq_len", t->o.seq_len},
                                {"dtype", t->o.dtype},
                                {"grad_reduce_dtype", t->o.grad_reduce_dtype},
                                {"optimizer", t->o.optimizer},
                                {"n_positions", r.n_positions},
                                {"ranks", r.ranks},
                                {"zero", r.layout.zero},
                                {"layout", r.layout.describe()},
                                {"micro_batch_size", r.micro_batch_size},
                                {"micro_batches", r.micro_batches},
                                {"threads", r.threads},
                                {"step_s", r.step_s},
                                {"tokens_per_s", r.tokens_per_s},
                                {"achieved_gflops", r.achieved_gflops},
                                {"peak_gflops", r.peak_gflops},
                                {"mfu", r.mfu},
                                {"comm_hidden", r.comm_hidden},
                                {"comm_blocked_s", r.comm_blocked_s},
                                {"comm_outstanding_s", r.comm_outstanding_s},
                                {"comm", r.comm},
                                {"model_state_bytes", r.model_state_bytes},
                                {"peak_rss_bytes", r.peak_rss},
                                {"estimate_bytes", r.estimate.total()},
                                {"peak_rss_max_bytes", r.peak_rss_max},
                                {"estimate_max_bytes", r.estimate_max},
                                {"bf16_scratch_bytes", r.bf16_scratch_bytes}};
            if (t->o.profile) j["profile"] = train::profile_json(r, t->o.steps);
            fmt::print("{}\n", j.dump());
            return;
        }
        fmt::print(
            "model        {} ({} parameters), batch {} x {} tokens, {} rank(s) x {} "
            "thread(s), {} matrix products\n",
            t->o.preset, r.parameters, t->o.batch_size, t->o.seq_len, r.ranks, r.threads,
            t->o.dtype);
        fmt::print("layout       {}, {} micro-batch(es) of {} per rank and step{}\n",
                   r.layout.describe(), r.micro_batches, r.micro_batch_size,
                   t->o.grad_reduce_dtype == "bf16" ? ", gradients reduced in bf16" : "");
        fmt::print("step         {:.3f} s (median of {})\n", r.step_s, t->o.steps);
        fmt::print("throughput   {:.0f} tokens/s\n", r.tokens_per_s);
        fmt::print(
            "model FLOPs  {:.1f} GFLOP/s = {:.3g} FLOP/token x tokens/s "
            "(6 x parameters + 6 x layers x T x heads x head width)\n",
            r.achieved_gflops, r.flops_per_token);
        fmt::print("MFU          {:.1f}% of the measured {} GEMM peak {:.1f} GFLOP/s\n",
                   100 * r.mfu, t->o.dtype, r.peak_gflops);
        fmt::print("memory       peak resident {:.1f} MiB; estimate {:.1f} MiB ({:+.1f}%)\n",
                   mib(r.peak_rss), mib(r.estimate.total()),
                   100.0 * (double(r.peak_rss) / double(r.estimate.total()) - 1));
        fmt::print("             {} per rank; model state {:.1f} MiB per rank\n",
                   r.estimate.describe(), mib(r.model_state_bytes));
        if (r.ranks > 1)
            fmt::print(
                "             the most of any rank: peak resident {:.1f} MiB; estimate "
                "{:.1f} MiB\n",
                mib(r.peak_rss_max), mib(r.estimate_max));
        if (r.bf16_scratch_bytes > 0)
            fmt::print("             bf16 operand scratch {:.1f} MiB (estimate {:.1f} MiB)\n",
                       mib(r.bf16_scratch_bytes), mib(r.estimate.bf16_operands));
        if (r.ranks > 1)
            fmt::print(
                "comm         {:.0f}% hidden behind compute ({:.3f} s blocked of {:.3f} s "
                "outstanding per step)\n",
                100 * r.comm_hidden, r.comm_blocked_s, r.comm_outstanding_s);
        if (r.layout.cp > 1 && r.comm.contains("cp")) {
            // The cp axis's sends and waits (ring shifts, TokenRing returns, Ulysses'
            // all-to-alls): the time in the calls (a blocking all-to-all) and in waits is the
            // part the attention did not hide.
            // Bytes sent: every operation's but the receives (an all-to-all counts its input).
            double sent = 0;
            for (const auto& [op, v] : r.comm.at("cp").items())
                if (op != "total" && op != "size" && op != "recv")
                    sent += v.at("bytes").get<double>();
            const nlohmann::json& cp = r.comm.at("cp").at("total");
            const double n = double(t->o.steps), wait = (cp.at("seconds").get<double>() +
                                                         cp.at("wait_seconds").get<double>()) /
                                                        n;
            fmt::print(
                "cp comm      {:.2f} MiB sent per rank and step, {:.3f} s blocked per step "
                "({:.1f}% of the step)\n",
                mib(int64_t(sent / n)), wait, 100 * wait / r.step_s);
        }
        if (t->o.profile)
            fmt::print("profile      per timed step, main thread of rank 0\n{}",
                       train::profile_table(r, t->o.steps));
    });
}

}  // namespace weft::cli
