#pragma once
// How fast this machine's matrix products can go: the peak MFU is measured against (`weft bench
// peak`, the trainer's and `weft bench train`'s MFU, `weft profile`'s engine profile).
#include <cstdint>
#include <iterator>

namespace weft::kernels {

// Measured large-GEMM throughput of this machine in GFLOP/s (fp32), for MFU: repeats an
// n×n×n product for about `seconds` after a warm-up and returns the best rate.
double measure_gemm_peak_gflops(int64_t n, double seconds);
// The same for bf16 inputs with fp32 accumulation and output (oneDNN's matmul primitive; AMX or
// AVX512-BF16 where the CPU has them). Where bf16 is emulated, the fp32 peak.
double measure_gemm_peak_bf16_gflops(int64_t n, double seconds);
// The best of measure_gemm_peak_gflops / measure_gemm_peak_bf16_gflops (bf16) over the sizes in
// `sizes` (kPeakSizes by default), `seconds` each: the peak MFU is measured against, what the
// matrix units can do. One size is not enough: on 2 Zen 5 cores oneDNN's bf16 product runs at
// 910-1020 GFLOP/s (the AVX512-BF16 units' limit, twice the fp32 FMAs' 480-500; the host drifts)
// at n = 512 and 1024 but at 780-930 at 2048; the fp32 one is the same at all three.
inline constexpr int64_t kPeakSizes[] = {512, 1024, 2048};
struct PeakMeasure {
    double gflops = 0;
    int64_t size = 0;  // where the best was measured
};
PeakMeasure measure_best_peak(bool bf16, double seconds, const int64_t* sizes = kPeakSizes,
                              int count = int(std::size(kPeakSizes)));

}  // namespace weft::kernels
