#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/cli/output_paths.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/comm/mesh.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/best_time.hpp"
#include "weft/kernels/gemm_peak.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/memory_bandwidth.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/memory_fit.hpp"
#include "weft/train/process.hpp"

namespace weft::cli {

namespace {
struct ProfileArgs {
    std::string out = "configs/clusters/local.json", name = "local", device_name;
    int nodes = 1, threads = 0;
    double seconds = 0.1;                          // per measured shape
    std::vector<int64_t> widths = {64, 256, 768};  // the model widths whose layer shapes are fitted
    double inter_gbs = 12.5, inter_latency_us = 10;
    double disk_read_gbs = 0, disk_write_gbs = 0;  // 0: not given, no "disk" written
};

using Clock = std::chrono::steady_clock;
using kernels::best_time;

// Solves the normal equations of least squares for x in A x ~ y (A: rows of 4).
std::array<double, 4> least_squares(const std::vector<std::array<double, 4>>& A,
                                    const std::vector<double>& y) {
    double N[4][5] = {};
    for (size_t r = 0; r < A.size(); ++r)
        for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) N[i][j] += A[r][i] * A[r][j];
            N[i][4] += A[r][i] * y[r];
        }
    for (int i = 0; i < 4; ++i) {  // Gauss-Jordan with partial pivoting
        int p = i;
        for (int r = i + 1; r < 4; ++r)
            if (std::abs(N[r][i]) > std::abs(N[p][i])) p = r;
        std::swap(N[i], N[p]);
        for (int r = 0; r < 4; ++r) {
            if (r == i || N[i][i] == 0) continue;
            const double f = N[r][i] / N[i][i];
            for (int c = i; c < 5; ++c) N[r][c] -= f * N[i][c];
        }
    }
    std::array<double, 4> x{};
    for (int i = 0; i < 4; ++i) x[i] = N[i][i] != 0 ? N[i][4] / N[i][i] : 0;
    return x;
}

// GEMM efficiency over the shapes a GPT-2 layer runs (forward [tokens, C] x [C, kC] and the
// two backward products) for several widths and token counts, fitted to the planner's model
// (plan/cluster.hpp): time = overhead + 2MNK / (peak · efficiency(M, N, K)), i.e.
//   time - overhead = (2MNK/peak) · (a + b/M + c/N + d/K),  max = 1/a, m_half = b/a, ...
// linear in (a, b, c, d). Each row is divided by its measured time, so that the fit minimises
// relative error: small shapes count as much as large ones.
// `peak` is raised to the best rate a large shape reached: on a shared machine the separate
// peak measurement may have run while a neighbour was busy, and efficiency must stay <= 1.
nlohmann::json fit_gemm(double& peak, double seconds, const std::vector<int64_t>& widths,
                        double& overhead) {
    std::vector<std::array<double, 4>> shapes;  // M, N, K, seconds
    std::vector<float> a, b, c;
    auto run = [&](int64_t M, int64_t N, int64_t K) {
        a.assign(size_t(M * K), 0.5f), b.assign(size_t(K * N), 0.25f), c.assign(size_t(M * N), 0);
        return best_time(seconds, [&] {
            kernels::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
        });
    };
    overhead = run(8, 8, 8);
    for (int64_t C : widths)
        for (int64_t tokens : {64, 256, 1024, 4096})
            for (auto [n, k] : {std::pair{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}})
                for (auto [M, N, K] : {std::tuple{tokens, n, k}, {tokens, k, n}, {n, k, tokens}}) {
                    const double t = run(M, N, K), flops = 2.0 * double(M * N * K);
                    shapes.push_back({double(M), double(N), double(K), t});
                    if (flops >= 2e9) peak = std::max(peak, flops / t);
                }
    std::vector<std::array<double, 4>> A;
    std::vector<double> y;
    for (const auto& [M, N, K, t] : shapes) {
        const double f = 2 * M * N * K / peak / t;
        A.push_back({f, f / M, f / N, f / K});
        y.push_back(std::max(t - overhead, 0.0) / t);
    }
    std::array<double, 4> x = least_squares(A, y);
    const double max = std::min(1.0, 1 / std::max(x[0], 1e-3));
    return {{"max", max},
            {"m_half", std::max(0.0, x[1] / x[0])},
            {"n_half", std::max(0.0, x[2] / x[0])},
            {"k_half", std::max(0.0, x[3] / x[0])}};
}

// Forward and backward of causal attention at GPT-2 shapes, as a fraction of the GEMM peak
// (FLOPs counted as model::ModelConfig does: 2·T·C per token forward, twice that backward).
double attention_efficiency(double peak, double seconds) {
    const int64_t B = 2, T = 512, NH = 12, HS = 64, C = NH * HS;
    std::vector<float> qkv(size_t(B * T * 3 * C), 0.01f), out(size_t(B * T * C)),
        lse(size_t(B * NH * T)), dqkv(qkv.size()), dout(out.size(), 0.001f);
    const double t = best_time(seconds, [&] {
        kernels::attention_forward_qkv(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
        kernels::attention_backward_qkv(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                        lse.data(), B, T, NH, HS);
    });
    return std::min(1.0, 3 * 2.0 * double(B * T * T * C) / (t * peak));
}

std::string cpu_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "cpu";
}
}  // namespace

void add_profile_command(CLI::App& app) {
    auto a = std::make_shared<ProfileArgs>();
    CLI::App* c = app.add_subcommand(
        "profile",
        "Measure this machine (GEMM efficiency over shapes, attention, memory bandwidth, MPI "
        "all-reduce under mpirun) and write a cluster file for `weft plan`");
    c->add_option("--out", a->out, "Cluster file to write")->capture_default_str();
    c->add_option("--name", a->name, "Cluster name")->capture_default_str();
    c->add_option("--nodes", a->nodes, "Nodes of this kind in the cluster")->capture_default_str();
    c->add_option("--threads", a->threads, "OpenMP threads per rank (0: as `weft train`)")
        ->capture_default_str();
    c->add_option("--seconds", a->seconds,
                  "Measuring time per shape (each peak size: 5 times this)")
        ->capture_default_str();
    c->add_option("--widths", a->widths,
                  "Model widths whose layer products (3 x 4 shapes at 64-4096 tokens each) the "
                  "GEMM efficiency is fitted to; the largest sets how long a profile takes")
        ->capture_default_str();
    c->add_option("--inter-node-gbs", a->inter_gbs,
                  "Inter-node bandwidth per rank, GB/s (not measurable on one node)")
        ->capture_default_str();
    c->add_option("--inter-node-latency-us", a->inter_latency_us, "Inter-node latency, us")
        ->capture_default_str();
    c->add_option("--disk-read-gbs", a->disk_read_gbs,
                  "The node's disk read bandwidth, GB/s, for weft plan --offload (not measured "
                  "here: weft train --offload prints it); with --disk-write-gbs");
    c->add_option("--disk-write-gbs", a->disk_write_gbs,
                  "The node's disk write bandwidth, GB/s; with --disk-read-gbs");
    c->callback([a] {
        WEFT_CHECK(a->nodes >= 1, "--nodes must be at least 1, got {}", a->nodes);
        WEFT_CHECK(a->seconds > 0, "--seconds must be positive, got {}", a->seconds);
        for (int64_t w : a->widths)
            WEFT_CHECK(w >= 8 && w <= 16384, "--widths {}: expected widths from 8 to 16384", w);
        WEFT_CHECK(a->inter_gbs > 0, "--inter-node-gbs must be positive, got {}", a->inter_gbs);
        WEFT_CHECK((a->disk_read_gbs == 0 && a->disk_write_gbs == 0) ||
                       (a->disk_read_gbs > 0 && a->disk_write_gbs > 0),
                   "--disk-read-gbs {} and --disk-write-gbs {}: expected both positive (the "
                   "node's disk, for weft plan --offload), or neither",
                   a->disk_read_gbs, a->disk_write_gbs);
        check_output_paths({{a->out, "--out", false}});
        // The resident size before any model allocation: what `weft bench train` calls the
        // baseline (code, libraries, MPI).
        const int64_t baseline = train::current_rss_bytes();
        Layout layout;
        comm::Mesh mesh(layout);
        comm::Group& world = mesh.group(comm::Axis::world);
        const int ranks = world.size();
        const int threads = train::set_threads_per_rank(a->threads);
        const bool root = world.rank() == 0;
        if (root) fmt::print(stderr, "weft profile: {} rank(s) x {} thread(s)\n", ranks, threads);
        // Every rank measures at once, as ranks of a job would run: they share the node.
        double peak = kernels::measure_best_peak(false, 5 * a->seconds).gflops * 1e9;
        double overhead = 0;
        nlohmann::json gemm = fit_gemm(peak, a->seconds, a->widths, overhead);
        double attn = attention_efficiency(peak, a->seconds);
        // The bf16 peak is this host's as much as the fp32 one: a file that took it from another
        // CPU (a Zen 5 host's 1.0 TFLOP/s on a Zen 4 with 0.45) priced a bf16 3B step at 2.2x too
        // fast (docs/memory.md).
        double peak_bf16 = kernels::measure_best_peak(true, 5 * a->seconds).gflops * 1e9;
        double bw =
            kernels::measure_memory_bandwidth(a->seconds) / ranks;  // per rank, all ranks streaming
        // The slowest rank sets the pace.
        double mins[4] = {-peak, -attn, -bw, -peak_bf16};
        comm::all_reduce(world, std::span<double>(mins), comm::ReduceOp::max);
        peak = -mins[0], attn = -mins[1], bw = -mins[2], peak_bf16 = -mins[3];

        nlohmann::json intra = {{"bandwidth_gbs", bw / 1e9 / 2}, {"latency_us", 2.0}};
        std::string link_note = "intra_node not measured (one rank): half the memory bandwidth";
        if (ranks > 1) {
            // Fit t = 2(n-1)·α + 2(n-1)/n·S/β, each row divided by its time so that the fit
            // minimises relative error, over 1 KB, 16 KB, 256 KB (for α) and 1-32 MB in steps of
            // 2x: the sizes the planner prices with β (activations that tensor parallelism
            // reduces, gradient buckets). On this machine β falls from about 9 GB/s at 4 MB to
            // 2.4 at 32 MB as buffers leave the caches; a fit of absolute times let the 32 MB
            // point alone set β and overestimated GPT-2's tensor-parallel all-reduces (12.6 MB)
            // 2.8x.
            std::vector<std::array<double, 4>> A;
            std::vector<double> y;
            const double n = ranks;
            for (int64_t floats : {int64_t(256), int64_t(4) << 10, int64_t(64) << 10,
                                   int64_t(256) << 10, int64_t(512) << 10, int64_t(1) << 20,
                                   int64_t(2) << 20, int64_t(4) << 20, int64_t(8) << 20}) {
                std::vector<float> buf(size_t(floats), 1.0f);
                // A fixed count, not best_time's: every rank must make the same calls.
                double t = 1e300;
                for (int rep = 0; rep < 6; ++rep) {
                    auto t0 = Clock::now();
                    comm::all_reduce(world, std::span<float>(buf));
                    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
                    if (rep > 0) t = std::min(t, dt);
                }
                comm::all_reduce(world, std::span<double>(&t, 1), comm::ReduceOp::max);
                A.push_back({2 * (n - 1) / t, 2 * (n - 1) / n * 4.0 * double(floats) / t, 0, 0});
                y.push_back(1.0);
            }
            std::array<double, 4> x = least_squares(A, y);
            intra = {{"bandwidth_gbs", x[1] > 0 ? 1e-9 / x[1] : bw / 1e9 / 2},
                     {"latency_us", std::max(0.0, x[0] * 1e6)}};
            link_note = fmt::format("intra_node fitted to MPI all-reduce over {} ranks", ranks);
        }
        if (!root) return;
        nlohmann::json j = {
            {"name", a->name},
            {"description",
             fmt::format("measured by `weft profile` with {} rank(s) x {} thread(s); a device "
                         "is one rank",
                         ranks, threads)},
            {"notes",
             {link_note, "inter_node not measured: from --inter-node-gbs/-latency-us",
              "peak_tflops.fp32 is the best large-GEMM rate (as `weft bench` uses for MFU)",
              "peak_tflops.bf16 is weft bench peak's bf16 x bf16 -> fp32 product; the GEMM and "
              "attention efficiencies are the fp32 ones, applied to it"}},
            {"device",
             {{"name", cpu_name()},
              {"peak_tflops", {{"fp32", peak / 1e12}, {"bf16", peak_bf16 / 1e12}}},
              {"memory_gib", double(std::max<int64_t>(0, train::meminfo_bytes("MemTotal"))) /
                                 ranks / double(1 << 30)},
              {"memory_bandwidth_gbs", bw / 1e9},
              {"gemm_efficiency", gemm},
              {"attention_efficiency", attn},
              {"kernel_overhead_us", overhead * 1e6},
              {"runtime_gib", double(baseline) / double(1 << 30)}}},
            {"devices_per_node", ranks},
            {"nodes", a->nodes},
            {"intra_node", intra},
            {"inter_node", {{"bandwidth_gbs", a->inter_gbs}, {"latency_us", a->inter_latency_us}}}};
        if (a->disk_read_gbs > 0) {
            j["disk"] = {{"read_gbs", a->disk_read_gbs}, {"write_gbs", a->disk_write_gbs}};
            j["notes"].push_back("disk not measured: from --disk-read-gbs/--disk-write-gbs");
        }
        std::ofstream f(a->out);
        WEFT_CHECK(f.good(), "--out {}: cannot write the file", a->out);
        f << j.dump(2) << "\n";
        fmt::print(
            "wrote {}: fp32 peak {:.1f} GFLOP/s, bf16 {:.1f}, GEMM efficiency {}, attention "
            "{:.2f}, memory {:.1f} GB/s per rank\n",
            a->out, peak / 1e9, peak_bf16 / 1e9, gemm.dump(), attn, bw / 1e9);
    });
}

}  // namespace weft::cli
