// Causal attention of GPT-2 small (NH=12, HS=64) on the fused qkv layout, B=4, forward and
// backward. FLOPs count the causal half: forward 4·B·NH·HS·T²/2, backward 2.5× that.
// The zigzag benchmarks run one rank's share of context-parallel ring attention (every ring
// step's blocks and merges, no communication) to show what cutting the keys into blocks costs:
// the same GFLOP/s as the whole-sequence kernel means nothing is lost. The causal-share
// benchmarks time each rank's blocks with zigzag and with a contiguous split (causal balance).
// The documents benchmark runs the same share over packed rows (--pack documents: each block
// masked by document, blocks no document spans skipped) against the unpacked share.
// Run with OMP_NUM_THREADS set; times are wall-clock. Each benchmark is labelled with the kernel
// path it ran; WEFT_BENCH_ISA=portable|avx2|avx512 forces one (where this CPU has it), so one
// binary measures a path against another.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/kernels/attention/varlen.hpp"
#include "weft/kernels/attention/zigzag.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"

namespace {

constexpr int64_t kB = 4, kNH = 12, kHS = 64, kC = kNH * kHS;

// Forces the path WEFT_BENCH_ISA names, if any, and labels the benchmark with the path in use.
void use_isa(benchmark::State& state) {
    using weft::kernels::Isa;
    if (const char* want = std::getenv("WEFT_BENCH_ISA"))
        for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512})
            if (std::string(want) == weft::kernels::isa_name(isa))
                weft::kernels::set_kernel_isa(isa);
    state.SetLabel(weft::kernels::isa_name(weft::kernels::kernel_isa()));
}

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
    use_isa(state);
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
    use_isa(state);
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

// The same in bf16 (attention_forward_bf16 / attention_backward_bf16, the --dtype bf16 model's
// calls): labelled "native" where the AVX512-BF16 path runs, else "widened" and the fp32 path.
struct Bf16Tensors {
    std::vector<uint16_t> qkv, out, dout;
    std::vector<float> lse, dqkv;
    weft::kernels::AttentionShape s;
    explicit Bf16Tensors(int64_t T)
        : out(kB * T * kC), lse(kB * kNH * T), dqkv(kB * T * 3 * kC), s{kB,  T,      T,      kNH,
                                                                        kHS, 3 * kC, 3 * kC, kC} {
        const Tensors t(T);
        for (float x : t.qkv) qkv.push_back(weft::kernels::fp32_to_bf16(x));
        for (float x : t.dout) dout.push_back(weft::kernels::fp32_to_bf16(x));
    }
    void forward() {
        weft::kernels::attention_forward_bf16(out.data(), lse.data(), qkv.data(), qkv.data() + kC,
                                              qkv.data() + 2 * kC, s);
    }
    void backward() {
        std::fill(dqkv.begin(), dqkv.end(), 0.0f);
        weft::kernels::attention_backward_bf16(dqkv.data(), dqkv.data() + kC, dqkv.data() + 2 * kC,
                                               dout.data(), qkv.data(), qkv.data() + kC,
                                               qkv.data() + 2 * kC, out.data(), lse.data(), s);
    }
};

void use_isa_bf16(benchmark::State& state) {
    use_isa(state);
    if (weft::kernels::attention_bf16_native(kHS))
        state.SetLabel("native bf16");
    else
        state.SetLabel(std::string("widened, ") +
                       weft::kernels::isa_name(weft::kernels::kernel_isa()));
}

void BM_attention_bf16_forward(benchmark::State& state) {
    const int64_t T = state.range(0);
    use_isa_bf16(state);
    Bf16Tensors t(T);
    for (auto _ : state) {
        t.forward();
        benchmark::DoNotOptimize(t.out.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        forward_flops(T) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Includes zeroing dqkv, as attention_backward_qkv's timing does.
void BM_attention_bf16_backward(benchmark::State& state) {
    const int64_t T = state.range(0);
    use_isa_bf16(state);
    Bf16Tensors t(T);
    t.forward();
    for (auto _ : state) {
        t.backward();
        benchmark::DoNotOptimize(t.dqkv.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.5 * forward_flops(T) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// One rank (rank 0) of a cp-way zigzag ring over a sequence of T: its two query chunks against
// the two key chunks of every rank, masked blocks skipped, partials merged; backward given the
// merged output. Chunks are dense [B][T/2cp] blocks, as a ring step holds them. With `docs`
// (each row's document starts), packed rows: each row's blocks masked by its documents.
struct ZigzagRank {
    weft::kernels::Zigzag z;
    int64_t c;
    std::vector<std::vector<float>> q, out, lse, dout, dq;  // per query part
    std::vector<std::vector<float>> k, v, dk, dv;           // per (rank, key part)
    std::vector<std::vector<int64_t>> docs;
    ZigzagRank(int64_t T, int64_t cp, std::vector<std::vector<int64_t>> row_docs = {})
        : z(weft::kernels::zigzag(T, cp)), c(z.chunk), docs(std::move(row_docs)) {
        auto fill = [](size_t n, uint32_t seed, float scale) {
            std::vector<float> x(n);
            for (size_t i = 0; i < n; ++i)
                x[i] = scale * float(int((i + seed) * 2654435761u % 201) - 100) / 100;
            return x;
        };
        for (int pt = 0; pt < 2; ++pt) {
            q.push_back(fill(kB * c * kC, pt, 0.02f));
            dout.push_back(fill(kB * c * kC, 7 + pt, 1.0f));
            out.emplace_back(kB * c * kC);
            lse.emplace_back(kB * kNH * c);
            dq.emplace_back(kB * c * kC);
        }
        for (int64_t i = 0; i < 2 * cp; ++i) {
            k.push_back(fill(kB * c * kC, 11 + uint32_t(i), 0.02f));
            v.push_back(fill(kB * c * kC, 31 + uint32_t(i), 1.0f));
            dk.emplace_back(kB * c * kC);
            dv.emplace_back(kB * c * kC);
        }
    }
    weft::kernels::AttentionShape shape(const weft::kernels::ZigzagBlock& b) const {
        weft::kernels::AttentionShape s{kB, c, c, kNH, kHS, kC, kC, kC, b.q_pos0};
        s.k_pos0 = b.k_pos0;
        return s;
    }
    template <class F>
    void each_block(F&& f) {
        for (int64_t step = 0; step < z.cp; ++step) {
            const int64_t kv = (z.cp - step) % z.cp;  // rank 0 receives from its left neighbour
            for (const auto& b : weft::kernels::zigzag_blocks(z, 0, kv))
                if (b.mask != weft::kernels::BlockMask::masked)
                    f(b, size_t(2 * kv + b.k_part), shape(b));
        }
    }
    void forward() {
        std::vector<float> part(kB * c * kC), part_lse(kB * kNH * c);
        for (auto& l : lse) std::fill(l.begin(), l.end(), -INFINITY);
        each_block([&](const auto& b, size_t kv, const auto& s) {
            if (docs.empty()) {
                weft::kernels::attention_forward(part.data(), part_lse.data(), q[b.q_part].data(),
                                                 k[kv].data(), v[kv].data(), s);
                weft::kernels::attention_merge(out[b.q_part].data(), lse[b.q_part].data(),
                                               part.data(), part_lse.data(),
                                               {kB, c, kNH, kHS, kC, kC});
                return;
            }
            for (int64_t r = 0; r < kB; ++r) {
                const int64_t at = r * c * kC, lat = r * kNH * c;
                if (weft::kernels::attention_forward_block_documents(
                        part.data(), part_lse.data(), q[b.q_part].data() + at, k[kv].data() + at,
                        v[kv].data() + at, row(s), docs[size_t(r)]))
                    weft::kernels::attention_merge(out[b.q_part].data() + at,
                                                   lse[b.q_part].data() + lat, part.data(),
                                                   part_lse.data(), {1, c, kNH, kHS, kC, kC});
            }
        });
    }
    void backward() {
        each_block([&](const auto& b, size_t kv, const auto& s) {
            if (docs.empty())
                return weft::kernels::attention_backward(
                    dq[b.q_part].data(), dk[kv].data(), dv[kv].data(), dout[b.q_part].data(),
                    q[b.q_part].data(), k[kv].data(), v[kv].data(), out[b.q_part].data(),
                    lse[b.q_part].data(), s);
            for (int64_t r = 0; r < kB; ++r) {
                const int64_t at = r * c * kC, lat = r * kNH * c;
                weft::kernels::attention_backward_block_documents(
                    dq[b.q_part].data() + at, dk[kv].data() + at, dv[kv].data() + at,
                    dout[b.q_part].data() + at, q[b.q_part].data() + at, k[kv].data() + at,
                    v[kv].data() + at, out[b.q_part].data() + at, lse[b.q_part].data() + lat,
                    row(s), docs[size_t(r)]);
            }
        });
    }
    static weft::kernels::AttentionShape row(weft::kernels::AttentionShape s) {
        s.B = 1;
        return s;
    }
    // The (query, key) pairs rank 0's queries see: causal, or inside their documents (docs).
    static double pairs(const weft::kernels::Zigzag& z,
                        const std::vector<std::vector<int64_t>>& docs) {
        double n = 0;
        for (int64_t r = 0; r < kB; ++r)
            for (int64_t p : weft::kernels::zigzag_positions(z, 0)) {
                int64_t start = 0;
                for (int64_t d : docs.empty() ? std::vector<int64_t>{0} : docs[size_t(r)])
                    if (d <= p) start = d;
                n += double(p - start + 1);
            }
        return n;
    }
    double flops() const {  // the forward FLOPs of the pairs this rank scores
        return 4.0 * kB * kNH * kHS * double(z.T) * double(z.T) / 2 / double(z.cp);
    }
};

void BM_attention_zigzag_forward(benchmark::State& state) {
    use_isa(state);
    ZigzagRank r(state.range(0), state.range(1));
    for (auto _ : state) {
        r.forward();
        benchmark::DoNotOptimize(r.out[0].data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(r.flops() * double(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
}

void BM_attention_zigzag_backward(benchmark::State& state) {
    use_isa(state);
    ZigzagRank r(state.range(0), state.range(1));
    r.forward();
    for (auto _ : state) {
        r.backward();
        benchmark::DoNotOptimize(r.dq[0].data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.5 * r.flops() * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Rows of a long-tailed corpus: document lengths lognormal around 300 tokens (sigma 1.2, as
// `weft prepare --synthetic N --lengths lognormal:300:1.2`), packed back to back and cut into
// kB rows of T; each row's document starts.
std::vector<std::vector<int64_t>> lognormal_rows(int64_t T) {
    std::mt19937 rng(37);
    std::lognormal_distribution<double> len(std::log(300.0), 1.2);
    std::vector<std::vector<int64_t>> rows(kB, std::vector<int64_t>{0});
    for (int64_t at = 0; at < kB * T;) {
        at += std::max<int64_t>(2, std::llround(len(rng)));
        if (at < kB * T && at % T != 0) rows[size_t(at / T)].push_back(at % T);
    }
    return rows;
}

// One rank's share of the ring, forward and backward, on unpacked (0) or packed (1) rows of
// lognormal_rows. Arguments: T, cp, packed. "pairs" is the share of the unpacked (query, key)
// pairs the rank still scores; GFLOP/s counts those it scores.
void BM_attention_zigzag_documents(benchmark::State& state) {
    use_isa(state);
    const int64_t T = state.range(0), cp = state.range(1);
    ZigzagRank r(T, cp, state.range(2) ? lognormal_rows(T) : std::vector<std::vector<int64_t>>{});
    for (auto _ : state) {
        r.forward();
        r.backward();
        benchmark::DoNotOptimize(r.dq[0].data());
    }
    const double pairs = ZigzagRank::pairs(r.z, r.docs);
    state.counters["pairs"] = pairs / ZigzagRank::pairs(r.z, {});
    state.counters["GFLOP/s"] =
        benchmark::Counter(3.5 * 4.0 * kNH * kHS * pairs * double(state.iterations()) / 1e9,
                           benchmark::Counter::kIsRate);
}

// Causal balance across the cp ranks (issue 13): one rank's attention, forward and backward, over
// the blocks its queries score, with zigzag sharding (chunks r and 2cp-1-r) or a contiguous
// split (rank r holds positions [rT/cp, (r+1)T/cp) and sees keys [0, (r+1)T/cp)). No merges and
// no communication: the kernel time each rank spends, to read max/min across ranks from.
// Arguments: T, cp, rank, zigzag (1) or contiguous (0).
void BM_attention_causal_share(benchmark::State& state) {
    const int64_t T = state.range(0), cp = state.range(1), rank = state.range(2);
    const bool zig = state.range(3) != 0;
    use_isa(state);
    struct Block {
        int64_t q_pos0, k_pos0, n;
    };
    std::vector<Block> blocks;
    if (zig) {
        const weft::kernels::Zigzag z = weft::kernels::zigzag(T, cp);
        for (int64_t kv = 0; kv < cp; ++kv)
            for (const auto& b : weft::kernels::zigzag_blocks(z, rank, kv))
                if (b.mask != weft::kernels::BlockMask::masked)
                    blocks.push_back({b.q_pos0, b.k_pos0, z.chunk});
    } else {
        const int64_t n = T / cp;
        for (int64_t j = 0; j <= rank; ++j) blocks.push_back({rank * n, j * n, n});
    }
    const int64_t n = blocks.front().n;
    Tensors t(n);  // one block's q, k, v, dout and outputs, reused for every block
    float* dq = t.dqkv.data();
    double pairs = 0;  // (query, key) pairs scored, for the FLOP count
    for (const Block& b : blocks)
        for (int64_t i = 0; i < b.n; ++i)
            pairs += double(std::clamp<int64_t>(b.q_pos0 + i - b.k_pos0 + 1, 0, b.n));
    for (auto _ : state) {
        for (const Block& b : blocks) {
            weft::kernels::AttentionShape s{kB, n, n, kNH, kHS, 3 * kC, 3 * kC, kC, b.q_pos0};
            s.k_pos0 = b.k_pos0;
            const float* q = t.qkv.data();
            weft::kernels::attention_forward(t.out.data(), t.lse.data(), q, q + kC, q + 2 * kC, s);
            weft::kernels::attention_backward(dq, dq + kC, dq + 2 * kC, t.dout.data(), q, q + kC,
                                              q + 2 * kC, t.out.data(), t.lse.data(), s);
        }
        benchmark::DoNotOptimize(dq);
    }
    state.counters["blocks"] = double(blocks.size());
    state.counters["GFLOP/s"] =
        benchmark::Counter(3.5 * 4.0 * kB * kNH * kHS * pairs * double(state.iterations()) / 1e9,
                           benchmark::Counter::kIsRate);
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
BENCHMARK(BM_attention_bf16_forward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_bf16_backward)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_causal_share)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (int64_t cp : {2, 4})
            for (int64_t zig : {1, 0})
                for (int64_t rank = 0; rank < cp; ++rank) b->Args({4096, cp, rank, zig});
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_zigzag_forward)
    ->Args({1024, 2})
    ->Args({4096, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_zigzag_backward)
    ->Args({1024, 2})
    ->Args({4096, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_zigzag_documents)
    ->Args({2048, 2, 0})
    ->Args({2048, 2, 1})
    ->Args({2048, 4, 0})
    ->Args({2048, 4, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
