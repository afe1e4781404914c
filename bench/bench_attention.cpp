// Causal attention of GPT-2 small (NH=12, HS=64) on the fused qkv layout, B=4, forward and
// backward. FLOPs count the causal half: forward 4·B·NH·HS·T²/2, backward 2.5× that.
// Run with OMP_NUM_THREADS set; times are wall-clock.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "weft/kernels/attention.hpp"

namespace {

constexpr int64_t kB = 4, kNH = 12, kHS = 64, kC = kNH * kHS;

double forward_flops(int64_t T) {
    return 4.0 * kB * kNH * kHS * double(T) * T / 2;
}

struct Tensors {
    std::vector<float> qkv, out, lse, dout, dqkv;
    explicit Tensors(int64_t T)
        : qkv(kB * T * 3 * kC),
          out(kB * T * kC),
          lse(kB * kNH * T),
          dout(kB * T * kC),
          dqkv(qkv.size()) {
        // Small deterministic values: the softmax stays spread, as after initialisation.
        for (size_t i = 0; i < qkv.size(); ++i)
            qkv[i] = 0.02f * float(int(i * 2654435761u % 201) - 100) / 100;
        for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(int(i * 40503u % 201) - 100) / 100;
    }
};

void BM_attention_forward(benchmark::State& state) {
    const int64_t T = state.range(0);
    Tensors t(T);
    for (auto _ : state) {
        weft::kernels::attention_forward_qkv(t.out.data(), t.lse.data(), t.qkv.data(), kB, T, kNH,
                                             kHS);
        benchmark::DoNotOptimize(t.out.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        forward_flops(T) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_attention_backward(benchmark::State& state) {
    const int64_t T = state.range(0);
    Tensors t(T);
    weft::kernels::attention_forward_qkv(t.out.data(), t.lse.data(), t.qkv.data(), kB, T, kNH, kHS);
    for (auto _ : state) {
        weft::kernels::attention_backward_qkv(t.dqkv.data(), t.dout.data(), t.qkv.data(),
                                              t.out.data(), t.lse.data(), kB, T, kNH, kHS);
        benchmark::DoNotOptimize(t.dqkv.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.5 * forward_flops(T) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_attention_forward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_backward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
