// Every matrix product of a GPT-2 124M training step (B*T = 4096 rows, C = 768) through weft's
// kernels, next to the alternatives they were chosen over: the two oneDNN entries (the matmul
// primitive and dnnl_sgemm) and other weight layouts / explicit transposes. Each benchmark reports
// its best iteration as GFLOP/s and as % of the peak measured at start-up, because the machine is
// shared and a mean would measure the neighbours.
//
//   bench_matmul --benchmark_filter=<regex>        (OMP_NUM_THREADS=2 for the target setup)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "weft/kernels/classifier.hpp"
#include "weft/kernels/gemm_peak.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"

namespace {

using namespace weft::kernels;

constexpr int64_t kRows = 4096;  // B * T = 4 * 1024
constexpr int64_t kC = 768;
constexpr int64_t kVocab = 50257;

struct Layer {
    const char* name;
    int64_t out, in;  // weight [out, in]
};
// The four linear layers of a GPT-2 block.
constexpr Layer kLayers[] = {
    {"qkv", 3 * kC, kC}, {"attn_proj", kC, kC}, {"fc", 4 * kC, kC}, {"fc_proj", kC, 4 * kC}};

double peak_gflops() {
    static double peak = [] {
        // WEFT_PEAK_GFLOPS skips the 3 s measurement when a driver runs one benchmark at a time.
        if (const char* given = std::getenv("WEFT_PEAK_GFLOPS")) return std::atof(given);
        double p = measure_gemm_peak_gflops(4096, 3.0);
        std::printf("measured fp32 GEMM peak (n=4096, best of ~3 s): %.1f GFLOP/s, %d threads\n", p,
                    omp_get_max_threads());
        return p;
    }();
    return peak;
}

std::vector<float> filled(int64_t n, float base) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = base + 0.001f * float(i % 1013) - 0.5f;
    return v;
}

double process_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Times each iteration and reports the best one. `util` is the process's CPU time over the wall
// time of that iteration: with OMP_NUM_THREADS=2 it is 2 when no neighbour took a core from us,
// so a result with util well below 2 was measured on a busy machine.
void run(benchmark::State& state, double flops, const std::function<void()>& body) {
    body();  // warm-up: primitive creation, page faults
    double best = 1e300, best_cpu = 0;
    for (auto _ : state) {
        double c0 = process_cpu_seconds();
        auto t0 = std::chrono::steady_clock::now();
        body();
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (t < best) {
            best = t;
            best_cpu = process_cpu_seconds() - c0;
        }
    }
    double gflops = flops / best * 1e-9;
    state.counters["best_ms"] = best * 1e3;
    state.counters["GFLOPs"] = gflops;
    state.counters["pct_peak"] = 100.0 * gflops / peak_gflops();
    state.counters["util"] = best_cpu / best;
}

// The oneDNN matmul primitive with the given strides, without weft's cache or backend choice.
struct RawPrimitive {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    dnnl::matmul matmul;
    dnnl::memory::desc a, b, c;
    RawPrimitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                 int64_t ldc, bool accumulate) {
        using dims = dnnl::memory::dims;
        auto f32 = dnnl::memory::data_type::f32;
        a = dnnl::memory::desc({M, K}, f32, ta ? dims{1, lda} : dims{lda, 1});
        b = dnnl::memory::desc({K, N}, f32, tb ? dims{1, ldb} : dims{ldb, 1});
        c = dnnl::memory::desc({M, N}, f32, dims{ldc, 1});
        dnnl::primitive_attr attr;
        if (accumulate) {
            dnnl::post_ops ops;
            ops.append_sum(1.0f);
            attr.set_post_ops(ops);
        }
        matmul = dnnl::matmul({dnnl::matmul::desc(a, b, c), attr, engine});
    }
    void operator()(const float* A, const float* B, float* C) {
        matmul.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(a, engine, const_cast<float*>(A))},
                                {DNNL_ARG_WEIGHTS, dnnl::memory(b, engine, const_cast<float*>(B))},
                                {DNNL_ARG_DST, dnnl::memory(c, engine, C)}});
        stream.wait();
    }
};

// out[cols, rows] = in[rows, cols]ᵀ, in cache-sized tiles.
void transpose(float* out, const float* in, int64_t rows, int64_t cols) {
    constexpr int64_t tile = 32;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += tile)
        for (int64_t c0 = 0; c0 < cols; c0 += tile)
            for (int64_t c = c0; c < std::min(cols, c0 + tile); ++c)
                for (int64_t r = r0; r < std::min(rows, r0 + tile); ++r)
                    out[c * rows + r] = in[r * cols + c];
}

enum Backend { kWeft, kPrimitive, kSgemm };
const char* backend_name(int b) {
    return b == kWeft ? "weft" : b == kPrimitive ? "primitive" : "sgemm";
}

// C = op(A) op(B) (+C) through the chosen entry.
std::function<void(const float*, const float*, float*)> product(int backend, bool ta, bool tb,
                                                                int64_t M, int64_t N, int64_t K,
                                                                bool accumulate) {
    int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    float beta = accumulate ? 1.0f : 0.0f;
    if (backend == kPrimitive) {
        auto p = std::make_shared<RawPrimitive>(ta, tb, M, N, K, lda, ldb, ldc, accumulate);
        return [p](const float* A, const float* B, float* C) { (*p)(A, B, C); };
    }
    if (backend == kSgemm)
        return [=](const float* A, const float* B, float* C) {
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        };
    return [=](const float* A, const float* B, float* C) {
        gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    };
}

// ---- forward: out[M,out] = inp[M,in] · Wᵀ ---------------------------------------------------

// Weight as stored by weft, [out, in] (NT product), through each backend.
void BM_forward(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " NT (W [out,in]) " + backend_name(backend));
    auto inp = filled(kRows * L.in, 0.1f), w = filled(L.out * L.in, 0.2f);
    std::vector<float> out(static_cast<size_t>(kRows * L.out));
    auto f = product(backend, false, true, kRows, L.out, L.in, false);
    run(state, 2.0 * kRows * L.out * L.in, [&] { f(inp.data(), w.data(), out.data()); });
}

// The same product with the weight stored [in, out] (NN), the layout Hugging Face's Conv1D has.
void BM_forward_w_in_out(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " NN (W [in,out]) " + backend_name(backend));
    auto inp = filled(kRows * L.in, 0.1f), w = filled(L.out * L.in, 0.2f);
    std::vector<float> out(static_cast<size_t>(kRows * L.out));
    auto f = product(backend, false, false, kRows, L.out, L.in, false);
    run(state, 2.0 * kRows * L.out * L.in, [&] { f(inp.data(), w.data(), out.data()); });
}

// The forward with its bias, as every GPT-2 linear layer has one: 0 matmul_forward, 1 the
// primitive with the bias in its epilogue, 2 sgemm then a pass adding the bias, 3 the bias
// broadcast into out first, then sgemm with beta = 1.
void BM_forward_bias(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int variant = int(state.range(1));
    const char* names[] = {"matmul_forward", "primitive bias arg", "sgemm + bias pass",
                           "bias fill + sgemm beta=1"};
    state.SetLabel(std::string(L.name) + " + bias: " + names[variant]);
    auto inp = filled(kRows * L.in, 0.1f), w = filled(L.out * L.in, 0.2f), b = filled(L.out, 0.3f);
    std::vector<float> out(static_cast<size_t>(kRows * L.out));
    const int64_t M = kRows, N = L.out, K = L.in;
    std::function<void()> body;
    if (variant == 0) {
        body = [&] { matmul_forward(out.data(), inp.data(), w.data(), b.data(), M, K, N); };
    } else if (variant == 1) {
        using dims = dnnl::memory::dims;
        auto f32 = dnnl::memory::data_type::f32;
        auto engine = std::make_shared<dnnl::engine>(dnnl::engine::kind::cpu, 0);
        auto stream = std::make_shared<dnnl::stream>(*engine);
        dnnl::memory::desc ad({M, K}, f32, dims{K, 1}), bd({K, N}, f32, dims{1, K}),
            cd({M, N}, f32, dims{N, 1}), biasd({1, N}, f32, dims{N, 1});
        auto mm = std::make_shared<dnnl::matmul>(
            dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, biasd, cd), *engine));
        body = [&, engine, stream, mm, ad, bd, cd, biasd] {
            mm->execute(*stream, {{DNNL_ARG_SRC, dnnl::memory(ad, *engine, inp.data())},
                                  {DNNL_ARG_WEIGHTS, dnnl::memory(bd, *engine, w.data())},
                                  {DNNL_ARG_BIAS, dnnl::memory(biasd, *engine, b.data())},
                                  {DNNL_ARG_DST, dnnl::memory(cd, *engine, out.data())}});
            stream->wait();
        };
    } else if (variant == 2) {
        body = [&] {
            dnnl_sgemm('N', 'T', M, N, K, 1.0f, inp.data(), K, w.data(), K, 0.0f, out.data(), N);
#pragma omp parallel for schedule(static)
            for (int64_t m = 0; m < M; ++m)
                for (int64_t n = 0; n < N; ++n) out[size_t(m * N + n)] += b[size_t(n)];
        };
    } else {
        body = [&] {
#pragma omp parallel for schedule(static)
            for (int64_t m = 0; m < M; ++m) std::copy(b.begin(), b.end(), out.begin() + m * N);
            dnnl_sgemm('N', 'T', M, N, K, 1.0f, inp.data(), K, w.data(), K, 1.0f, out.data(), N);
        };
    }
    run(state, 2.0 * M * N * K, body);
}

// ---- backward, input gradient: dinp[M,in] = dout[M,out] · W[out,in] -------------------------

void BM_dinp(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " NN dout·W " + backend_name(backend));
    auto dout = filled(kRows * L.out, 0.1f), w = filled(L.out * L.in, 0.2f);
    std::vector<float> dinp(static_cast<size_t>(kRows * L.in));
    auto f = product(backend, false, false, kRows, L.in, L.out, false);
    run(state, 2.0 * kRows * L.out * L.in, [&] { f(dout.data(), w.data(), dinp.data()); });
}

// Explicit Wᵀ ([in,out]) first, then an NT product; the transpose is inside the timing.
void BM_dinp_transpose_w(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " transpose(W) + NT " + backend_name(backend));
    auto dout = filled(kRows * L.out, 0.1f), w = filled(L.out * L.in, 0.2f);
    std::vector<float> wt(w.size()), dinp(static_cast<size_t>(kRows * L.in));
    auto f = product(backend, false, true, kRows, L.in, L.out, false);
    run(state, 2.0 * kRows * L.out * L.in, [&] {
        transpose(wt.data(), w.data(), L.out, L.in);
        f(dout.data(), wt.data(), dinp.data());
    });
}

// ---- backward, weight gradient: dW[out,in] += dout[M,out]ᵀ · inp[M,in] ----------------------

void BM_dweight(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " TN doutᵀ·inp " + backend_name(backend));
    auto dout = filled(kRows * L.out, 0.1f), inp = filled(kRows * L.in, 0.2f);
    std::vector<float> dw(static_cast<size_t>(L.out * L.in), 0.0f);
    auto f = product(backend, true, false, L.out, L.in, kRows, true);
    run(state, 2.0 * kRows * L.out * L.in, [&] { f(dout.data(), inp.data(), dw.data()); });
}

// Explicit doutᵀ ([out,M]) first, then NN.
void BM_dweight_transpose_dout(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " transpose(dout) + NN " + backend_name(backend));
    auto dout = filled(kRows * L.out, 0.1f), inp = filled(kRows * L.in, 0.2f);
    std::vector<float> dout_t(dout.size()), dw(static_cast<size_t>(L.out * L.in), 0.0f);
    auto f = product(backend, false, false, L.out, L.in, kRows, true);
    run(state, 2.0 * kRows * L.out * L.in, [&] {
        transpose(dout_t.data(), dout.data(), kRows, L.out);
        f(dout_t.data(), inp.data(), dw.data());
    });
}

// The gradient of a weight stored [in,out]: dWᵀ[in,out] += inpᵀ · dout (TN with the roles of
// the two activations swapped).
void BM_dweight_w_in_out(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    int backend = int(state.range(1));
    state.SetLabel(std::string(L.name) + " TN inpᵀ·dout (W [in,out]) " + backend_name(backend));
    auto dout = filled(kRows * L.out, 0.1f), inp = filled(kRows * L.in, 0.2f);
    std::vector<float> dwt(static_cast<size_t>(L.out * L.in), 0.0f);
    auto f = product(backend, true, false, L.in, L.out, kRows, true);
    run(state, 2.0 * kRows * L.out * L.in, [&] { f(inp.data(), dout.data(), dwt.data()); });
}

// matmul_backward as the model calls it: dinp, dweight and dbias together.
void BM_matmul_backward(benchmark::State& state) {
    const Layer& L = kLayers[state.range(0)];
    state.SetLabel(std::string(L.name) + " matmul_backward (dinp, dW, db)");
    auto dout = filled(kRows * L.out, 0.1f), inp = filled(kRows * L.in, 0.2f),
         w = filled(L.out * L.in, 0.3f);
    std::vector<float> dinp(static_cast<size_t>(kRows * L.in)),
        dw(static_cast<size_t>(L.out * L.in), 0.0f), db(static_cast<size_t>(L.out), 0.0f);
    run(state, 4.0 * kRows * L.out * L.in, [&] {
        matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), kRows,
                        L.in, L.out, false);
    });
}

// ---- the classifier ---------------------------------------------------------------------------

// The three products of one chunk of R rows, as the fused kernel issues them.
void BM_classifier_chunk_gemms(benchmark::State& state) {
    int64_t R = state.range(0);
    int backend = int(state.range(1));
    state.SetLabel("R=" + std::to_string(R) + " logits+dx+dwte " + backend_name(backend));
    auto x = filled(R * kC, 0.1f), wte = filled(kVocab * kC, 0.2f);
    auto logits = filled(R * kVocab, 0.3f);
    std::vector<float> dx(static_cast<size_t>(R * kC)),
        dwte(static_cast<size_t>(kVocab * kC), 0.0f);
    auto fl = product(backend, false, true, R, kVocab, kC, false);
    auto fdx = product(backend, false, false, R, kC, kVocab, false);
    auto fdw = product(backend, true, false, kVocab, kC, R, true);
    run(state, 6.0 * R * kVocab * kC, [&] {
        fl(x.data(), wte.data(), logits.data());
        fdx(logits.data(), wte.data(), dx.data());
        fdw(logits.data(), x.data(), dwte.data());
    });
}

// One product of the chunk: 0 logits (NT), 1 dx (NN, K = V), 2 dwte (TN, K = R, accumulate).
void BM_classifier_gemm(benchmark::State& state) {
    int64_t R = state.range(0);
    int which = int(state.range(1)), backend = int(state.range(2));
    const char* names[] = {"logits x·wteᵀ", "dx dlogits·wte", "dwte += dlogitsᵀ·x"};
    state.SetLabel("R=" + std::to_string(R) + " " + names[which] + " " + backend_name(backend));
    auto x = filled(R * kC, 0.1f), wte = filled(kVocab * kC, 0.2f);
    auto logits = filled(R * kVocab, 0.3f);
    std::vector<float> dx(static_cast<size_t>(R * kC)),
        dwte(static_cast<size_t>(kVocab * kC), 0.0f);
    std::function<void()> body;
    if (which == 0) {
        auto f = product(backend, false, true, R, kVocab, kC, false);
        body = [&, f] { f(x.data(), wte.data(), logits.data()); };
    } else if (which == 1) {
        auto f = product(backend, false, false, R, kC, kVocab, false);
        body = [&, f] { f(logits.data(), wte.data(), dx.data()); };
    } else {
        auto f = product(backend, true, false, kVocab, kC, R, true);
        body = [&, f] { f(logits.data(), x.data(), dwte.data()); };
    }
    run(state, 2.0 * R * kVocab * kC, body);
}

double bf16_peak_gflops() {
    static double peak = [] {
        double p = measure_gemm_peak_bf16_gflops(2048, 2.0);
        std::printf("measured bf16 GEMM peak (n=2048, best of ~2 s): %.1f GFLOP/s\n", p);
        return p;
    }();
    return peak;
}

// One product of a chunk of R rows (512, 1024: weft's chunk, 2048) as --dtype bf16 runs it (weft's
// gemm under bf16 precision, oneDNN's bf16 primitive), every operand pinned (Bf16OperandScope) so
// that only the product is timed, not the rounding: 0 logits, 1 dx, 2 dwte as above. pct_bf16_peak
// is against the bf16 GEMM peak.
void BM_classifier_gemm_bf16(benchmark::State& state) {
    const int64_t R = state.range(1);
    const int which = int(state.range(0));
    const char* names[] = {"logits x·wteᵀ", "dx dlogits·wte", "dwte += dlogitsᵀ·x",
                           "dwte += (dlogitsᵀ stored)·x", "dx (dlogitsᵀ stored)ᵀ·wte"};
    state.SetLabel("R=" + std::to_string(R) + " bf16 " + names[which]);
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    auto x = filled(R * kC, 0.1f), wte = filled(kVocab * kC, 0.2f);
    auto logits = filled(R * kVocab, 0.3f);
    std::vector<float> dx(static_cast<size_t>(R * kC)),
        dwte(static_cast<size_t>(kVocab * kC), 0.0f);
    const Bf16OperandScope px(x.data(), R, kC, kC), pw(wte.data(), kVocab, kC, kC),
        pl(logits.data(), R, kVocab, kVocab);
    std::function<void()> body;
    if (which == 0)
        body = [&] {
            gemm(false, true, R, kVocab, kC, 1.0f, x.data(), kC, wte.data(), kC, 0.0f,
                 logits.data(), kVocab);
        };
    else if (which == 1)
        body = [&] {
            gemm(false, false, R, kC, kVocab, 1.0f, logits.data(), kVocab, wte.data(), kC, 0.0f,
                 dx.data(), kC);
        };
    else if (which == 2)
        body = [&] {
            gemm(true, false, kVocab, kC, R, 1.0f, logits.data(), kVocab, x.data(), kC, 1.0f,
                 dwte.data(), kC);
        };
    // 3: dwte with dlogits already transposed ([V, R]), a plain A; 4: dx from that copy (a
    // transposed A). 3 and 4 are what the classifier runs.
    std::vector<float> logits_t;
    std::optional<Bf16OperandScope> pt;
    if (which >= 3) {
        logits_t.resize(logits.size());
        transpose(logits_t.data(), logits.data(), R, kVocab);
        pt.emplace(logits_t.data(), kVocab, R, R);
    }
    if (which == 3)
        body = [&] {
            gemm(false, false, kVocab, kC, R, 1.0f, logits_t.data(), R, x.data(), kC, 1.0f,
                 dwte.data(), kC);
        };
    else if (which == 4)
        body = [&] {
            gemm(true, false, R, kC, kVocab, 1.0f, logits_t.data(), R, wte.data(), kC, 0.0f,
                 dx.data(), kC);
        };
    run(state, 2.0 * R * kVocab * kC, body);
    state.counters["pct_bf16_peak"] = 100.0 * state.counters["GFLOPs"] / bf16_peak_gflops();
}

// A bf16 backward's first pass over its output gradient dout [4096, N]: rounding it for the
// products and summing the bias gradient, as two passes (convert_fp32_to_bf16, then
// matmul_backward's bias_backward) or one (convert_fp32_to_bf16_sum_columns). N = 768 (attn_proj,
// fc_proj), 2304 (qkv). GB/s counts one read of dout and one write of its rounding.
void BM_dout_round_bias(benchmark::State& state) {
    const int64_t N = state.range(0);
    const bool fused = state.range(1) != 0;
    state.SetLabel(std::string(fused ? "one pass" : "two passes") + " N=" + std::to_string(N));
    const auto dout = filled(kRows * N, 0.1f);
    std::vector<uint16_t> d16(static_cast<size_t>(kRows * N));
    std::vector<float> db(static_cast<size_t>(N), 0.0f);
    double best = 1e300;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        if (fused) {
            convert_fp32_to_bf16_sum_columns(d16.data(), db.data(), dout.data(), kRows, N);
        } else {
            convert_fp32_to_bf16(d16.data(), dout.data(), kRows, N, N);
            matmul_backward(nullptr, nullptr, db.data(), dout.data(), nullptr, nullptr, kRows, 1, N,
                            false);
        }
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    state.counters["best_ms"] = best * 1e3;
    state.counters["GBps"] = double(kRows * N) * 6.0 / best * 1e-9;
}

// The fused kernel on a whole GPT-2 batch; FLOPs counted are the three GEMMs (6·N·V·C).
void BM_classifier_forward_backward(benchmark::State& state) {
    const int64_t N = kRows;
    state.SetLabel("N=4096 V=50257 C=768 fused, scratch " +
                   std::to_string(classifier_scratch_floats(N, kVocab) * 4 >> 20) + " MiB");
    auto x = filled(N * kC, 0.1f), wte = filled((kVocab + 47) * kC, 0.2f);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = int32_t(n * 7919 % kVocab);
    std::vector<float> loss(static_cast<size_t>(N)), dx(static_cast<size_t>(N * kC)),
        dwte(wte.size(), 0.0f);
    run(state, 6.0 * N * kVocab * kC, [&] {
        classifier_forward_backward(loss.data(), dx.data(), dwte.data(), x.data(), wte.data(),
                                    targets.data(), N, kC, kVocab, 1.0f / float(N));
    });
}

void BM_peak(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(peak_gflops());
    state.counters["GFLOPs"] = peak_gflops();
}

void layers_by_backend(benchmark::internal::Benchmark* b) {
    for (int64_t l = 0; l < 4; ++l)
        for (int64_t backend : {kWeft, kPrimitive, kSgemm}) b->Args({l, backend});
}
void layers(benchmark::internal::Benchmark* b) {
    for (int64_t l = 0; l < 4; ++l) b->Args({l});
}

}  // namespace

BENCHMARK(BM_peak)->Iterations(1);
BENCHMARK(BM_forward)->Apply(layers_by_backend)->MinTime(0.3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_forward_w_in_out)
    ->Apply(layers_by_backend)
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_forward_bias)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3}})
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dinp)->Apply(layers_by_backend)->MinTime(0.3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dinp_transpose_w)
    ->Apply(layers_by_backend)
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dweight)->Apply(layers_by_backend)->MinTime(0.3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dweight_transpose_dout)
    ->Apply(layers_by_backend)
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dweight_w_in_out)
    ->Apply(layers_by_backend)
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_matmul_backward)->Apply(layers)->MinTime(0.3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_classifier_gemm)
    ->ArgsProduct({{256, 512, 1024, 2048}, {0, 1, 2}, {kPrimitive, kSgemm}})
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_classifier_chunk_gemms)
    ->ArgsProduct({{256, 512, 1024, 2048}, {kWeft}})
    ->MinTime(0.5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_classifier_gemm_bf16)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {512, 1024, 2048}})
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dout_round_bias)
    ->ArgsProduct({{768, 2304}, {0, 1}})
    ->MinTime(0.3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_classifier_forward_backward)->MinTime(2.0)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
