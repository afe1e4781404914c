#include "weft/kernels/gemm_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::kernels {

namespace {
// GFLOP/s of the fastest of repeated n x n x n products (at least 4, for about `seconds`);
// `run` performs one and returns its seconds. The best, not the mean: the peak is what the
// machine can do, not what it did while something else ran.
template <typename Run>
double best_gflops(int64_t n, double seconds, Run&& run) {
    double best = 1e300, spent = 0;
    for (int i = 0; i < 4 || spent < seconds; ++i) {
        double t = run();
        best = std::min(best, t);
        spent += t;
    }
    return 2.0 * double(n) * double(n) * double(n) / best * 1e-9;
}
}  // namespace

double measure_gemm_peak_gflops(int64_t n, double seconds) {
    WEFT_CHECK(n > 0, "measure_gemm_peak_gflops: n={} must be positive", n);
    size_t count = size_t(n) * size_t(n);
    // Ordinary values (no zeros, no denormals) so that nothing runs faster than real data.
    std::vector<float> a(count), b(count), c(count);
    for (size_t i = 0; i < count; ++i) {
        a[i] = 0.5f + 0.001f * float(i % 997);
        b[i] = 0.25f - 0.001f * float(i % 991);
    }
    // Both weight layouts a linear layer uses (NT forward, NN backward); the peak is the best
    // either reaches, so that MFU is measured against what this machine can really do.
    auto run = [&](bool trans_b) {
        auto t0 = std::chrono::steady_clock::now();
        gemm(false, trans_b, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    run(false);
    run(true);
    int i = 0;
    return best_gflops(n, seconds, [&] { return run(i++ % 2 == 1); });
}

double measure_gemm_peak_bf16_gflops(int64_t n, double seconds) {
    WEFT_CHECK(n > 0, "measure_gemm_peak_bf16_gflops: n={} must be positive", n);
    // Emulated bf16 products run on the fp32 units: their peak is the fp32 one.
    if (!bf16_products_native()) return measure_gemm_peak_gflops(n, seconds);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims dims{n, n};
    // bf16 inputs with fp32 accumulation and output: what mixed-precision training multiplies.
    dnnl::memory::desc a(dims, dt::bf16, tag::ab), b(dims, dt::bf16, tag::ab),
        c(dims, dt::f32, tag::ab);
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    dnnl::matmul mm(pd);
    std::vector<uint16_t> ab(size_t(n) * size_t(n)), bb(ab.size());
    std::vector<float> cb(ab.size());
    for (size_t i = 0; i < ab.size(); ++i) {  // bf16 = the top half of an fp32
        float x = 0.5f + 0.001f * float(i % 997), y = 0.25f - 0.001f * float(i % 991);
        uint32_t ux, uy;
        std::memcpy(&ux, &x, 4);
        std::memcpy(&uy, &y, 4);
        ab[i] = uint16_t(ux >> 16), bb[i] = uint16_t(uy >> 16);
    }
    std::vector<std::byte> scratch(pd.scratchpad_desc().get_size());
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(a, engine, ab.data())},
        {DNNL_ARG_WEIGHTS, dnnl::memory(b, engine, bb.data())},
        {DNNL_ARG_DST, dnnl::memory(c, engine, cb.data())},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), engine, scratch.data())}};
    dnnl::stream stream(engine);
    auto run = [&] {
        auto t0 = std::chrono::steady_clock::now();
        mm.execute(stream, args);
        stream.wait();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    run();
    return best_gflops(n, seconds, run);
}

PeakMeasure measure_best_peak(bool bf16, double seconds, const int64_t* sizes, int count) {
    WEFT_CHECK(count > 0, "measure_best_peak: no sizes");
    PeakMeasure best;
    for (int i = 0; i < count; ++i) {
        const double g = bf16 ? measure_gemm_peak_bf16_gflops(sizes[i], seconds)
                              : measure_gemm_peak_gflops(sizes[i], seconds);
        if (g > best.gflops) best = {g, sizes[i]};
    }
    return best;
}

}  // namespace weft::kernels
