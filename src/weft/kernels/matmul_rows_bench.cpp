#include "weft/kernels/matmul_rows_bench.hpp"

#include <algorithm>
#include <cstddef>
#include <ctime>
#include <memory>

#include "weft/core/buffer.hpp"
#include "weft/kernels/best_time.hpp"
#include "weft/kernels/matmul_rows.hpp"

namespace weft::kernels {

namespace {

struct Linear {
    int64_t N, K;
    bool swiglu = false;  // [gate | up], SwiGLU applied as each thread computes them
};

// A Llama layer's products as the model runs them (q, k and v as one, o, gate and up as one with
// their SwiGLU, down) n_layer times, then the head. Each product pays a start and an end beside its
// arithmetic: timed as seven products a layer, the 135M model's passes took 6-7% longer in bf16
// (1 and 16 rows) and up to 2% in fp32.
std::vector<Linear> linears(const RowsBenchShape& s) {
    std::vector<Linear> out;
    for (int64_t l = 0; l < s.n_layer; ++l)
        for (Linear x : {Linear{s.n_embd + 2 * s.kv_dim, s.n_embd}, Linear{s.n_embd, s.n_embd},
                         Linear{2 * s.hidden, s.n_embd, true}, Linear{s.n_embd, s.hidden}})
            out.push_back(x);
    out.push_back({s.vocab, s.n_embd});
    return out;
}

// Values of a trained layer's size, no zeros, cheap to make.
void fill(float* v, int64_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float(x >> 8) / float(1 << 24) - 0.5f) * 0.1f;
    }
}

}  // namespace

std::vector<RowsBenchPoint> bench_matmul_rows(const RowsBenchShape& shape,
                                              const std::vector<std::string>& dtypes,
                                              const std::vector<int64_t>& rows, double seconds,
                                              BandwidthProbe* probe) {
    const std::vector<Linear> layers = linears(shape);
    int64_t widest = 0, weights = 0, max_m = 1;
    for (const Linear& l : layers) widest = std::max({widest, l.N, l.K}), weights += l.N * l.K;
    for (int64_t m : rows) max_m = std::max(max_m, m);
    std::vector<float> x(size_t(max_m * widest)), y(size_t(max_m * widest));
    fill(x.data(), int64_t(x.size()), 1);

    // One buffer for all the weights, as a model's parameters lie (and on the huge pages a
    // Buffer of that size takes): the stream and its TLB misses are the model's.
    Buffer all(weights);
    std::vector<const float*> fp32(layers.size());
    for (size_t i = 0, at = 0; i < layers.size(); at += size_t(layers[i].N * layers[i].K), ++i) {
        fill(all.data() + at, layers[i].N * layers[i].K, uint32_t(i + 2));
        fp32[i] = all.data() + at;
    }
    std::vector<RowsBenchPoint> out;
    auto measure = [&](const std::string& dtype, double bytes_per_weight, auto&& product) {
        for (int64_t m : rows) {
            // CPU time beside the best wall time: on a shared machine the wall time counts the
            // other processes' turns, CPU time only this one's (its threads' waits included).
            int64_t passes = 0;
            std::clock_t cpu_ticks = 0;
            double bandwidth = 0;
            const double t = best_time(
                seconds,
                [&] {
                    const std::clock_t c0 = std::clock();
                    for (size_t i = 0; i < layers.size(); ++i) product(i, m);
                    cpu_ticks += std::clock() - c0;
                    ++passes;
                },
                [&] {
                    if (probe) bandwidth = std::max(bandwidth, probe->once());
                });
            const double cpu = double(cpu_ticks) / CLOCKS_PER_SEC / double(passes);
            out.push_back({dtype, m, t, cpu, 2.0 * double(m) * double(weights),
                           bytes_per_weight * double(weights), bandwidth});
        }
    };
    auto wanted = [&](const char* d) {
        return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end();
    };
    if (wanted("fp32"))
        measure("fp32", 4, [&](size_t i, int64_t m) {
            const Linear& l = layers[i];
            if (l.swiglu)
                matmul_rows_swiglu(y.data(), x.data(), fp32[i], m, l.K, l.N / 2);
            else
                matmul_rows(y.data(), x.data(), fp32[i], nullptr, m, l.K, l.N);
        });
    if (wanted("bf16")) {
        // The fp32 weights go once the bf16 copies are made (1.5x their memory meanwhile); the
        // copies share one huge-page arena, as a serving model's (model::RowProducts).
        HugePageArena arena;
        std::vector<RowWeightsBf16> bf16;
        for (size_t i = 0; i < layers.size(); ++i)
            bf16.emplace_back(fp32[i], layers[i].N, layers[i].K, arena);
        all = Buffer();
        measure("bf16", 2, [&](size_t i, int64_t m) {
            if (layers[i].swiglu)
                matmul_rows_bf16_swiglu(y.data(), x.data(), bf16[i], m);
            else
                matmul_rows_bf16(y.data(), x.data(), bf16[i], nullptr, m);
        });
    }
    return out;
}

}  // namespace weft::kernels
