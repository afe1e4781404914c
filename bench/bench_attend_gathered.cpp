// Decode attention as serving runs it: one task of model::attend_rows, the query heads of one kv
// head (kernels::attend_gathered_group) over n cached positions of a paged pool (model::KvPool),
// SmolLM-135M's shape (3 query heads a kv head, 3 kv heads of 64, blocks of 16 positions). One
// thread. "warm": the same sequence every call, its keys and values in cache (the arithmetic);
// "cold": each call another of sequences whose keys and values total 64 MiB, their blocks taken
// from a pool of 256 MiB or more freed in shuffled order (a server's pool after some traffic), so
// that they come from memory, as in a decode step, whose streamed weights evicted them.
// GB/s counts the bytes of keys and values a call uses.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "weft/kernels/attend_gathered.hpp"
#include "weft/model/kv_pool.hpp"

namespace {

using weft::model::BlockTable;
using weft::model::KvPool;

constexpr int64_t kG = 3, kNKV = 3, kHS = 64, kWidth = kNKV * kHS, kBlock = 16, kHead = 1;

template <typename T>
void run(benchmark::State& state) {
    constexpr bool bf16 = std::is_same_v<T, uint16_t>;
    const int64_t n = state.range(0);
    const bool cold = state.range(1) != 0;
    const int64_t bytes = n * 2 * kHS * int64_t(sizeof(T));
    const int64_t sequences = cold ? std::max<int64_t>(16, (int64_t(64) << 20) / bytes) : 1;
    const int64_t per_sequence = (n + kBlock - 1) / kBlock;
    const int64_t block_bytes = KvPool::bytes(1, 1, kWidth, kBlock, bf16);
    const int64_t blocks =
        std::max<int64_t>((int64_t(256) << 20) / block_bytes, sequences * per_sequence);
    KvPool pool(blocks, 1, kWidth, kHS, kBlock, bf16);
    std::vector<int32_t> all(static_cast<size_t>(blocks));
    for (int32_t& b : all) b = pool.allocate();
    std::shuffle(all.begin(), all.end(), std::mt19937(7));
    for (int32_t b : all) pool.release(b);
    std::vector<std::vector<const T*>> keys, values;
    for (int64_t s = 0; s < sequences; ++s) {
        BlockTable table;
        pool.grow(table, n);
        std::vector<const T*> ks, vs;
        for (int64_t j = 0; j < n; ++j)
            if constexpr (bf16) {
                ks.push_back(pool.k16(table, 0, j, kHead));
                vs.push_back(pool.v16(table, 0, j, kHead));
            } else {
                ks.push_back(pool.k(table, 0, j, kHead));
                vs.push_back(pool.v(table, 0, j, kHead));
            }
        keys.push_back(std::move(ks));
        values.push_back(std::move(vs));
    }
    std::vector<float> q(size_t(kG * kHS), 0.01f), out(size_t(kG * kHS)), scores(size_t(kG * n));
    int64_t s = 0;
    for (auto _ : state) {
        weft::kernels::attend_gathered_group(out.data(), q.data(), kG, keys[size_t(s)].data(),
                                             values[size_t(s)].data(), n, kHS, 0.125f,
                                             scores.data());
        benchmark::DoNotOptimize(out.data());
        s = (s + 1) % sequences;
    }
    state.SetLabel(cold ? "cold" : "warm");
    state.counters["GB/s"] = benchmark::Counter(double(bytes) * double(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

void BM_attend_gathered_bf16(benchmark::State& state) {
    run<uint16_t>(state);
}
void BM_attend_gathered_fp32(benchmark::State& state) {
    run<float>(state);
}

void shapes(benchmark::internal::Benchmark* b) {
    for (int64_t cold : {0, 1})
        for (int64_t n : {128, 512, 2048}) b->Args({n, cold});
}

BENCHMARK(BM_attend_gathered_bf16)->Apply(shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attend_gathered_fp32)->Apply(shapes)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
