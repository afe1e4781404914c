// The next-token choice a sampled request makes after each forward (model::pick_token): the
// candidates in decreasing logit order, their weights exp((logit - top) / temperature) and the
// draw, over a vocabulary of V ids (SmolLM's test tokenizer's 5256, GPT-2's 50257, Llama 3's
// 128256); greedy (an argmax) beside it. Logits spread as a trained model's (normal, sd 3).
// One thread; the serving engine runs a step's choices side by side on its team.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "weft/model/generate.hpp"

namespace {

std::vector<float> logits(int64_t V) {
    std::mt19937 g(11);
    std::normal_distribution<float> n(0.0f, 3.0f);
    std::vector<float> l(static_cast<size_t>(V));
    for (float& x : l) x = n(g);
    return l;
}

void BM_pick_token(benchmark::State& state) {
    const std::vector<float> l = logits(state.range(0));
    weft::model::SampleOptions o;
    o.temperature = state.range(1) == 0 ? 0.0f : 1.0f;
    o.top_p = state.range(1) == 2 ? 0.9f : 1.0f;
    state.SetLabel(state.range(1) == 0   ? "greedy"
                   : state.range(1) == 1 ? "temperature 1"
                                         : "top_p 0.9");
    float u = 0.5f;
    for (auto _ : state) {
        benchmark::DoNotOptimize(weft::model::pick_token(l, o, u));
        u = u < 0.9f ? u + 0.1f : 0.05f;
    }
}

BENCHMARK(BM_pick_token)
    ->ArgsProduct({{5256, 50257, 128256}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
