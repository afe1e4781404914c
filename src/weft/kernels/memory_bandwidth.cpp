#include "weft/kernels/memory_bandwidth.hpp"

#include <omp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "weft/kernels/best_time.hpp"
#include "weft/kernels/chunk_team.hpp"
#include "weft/kernels/omp_for.hpp"

namespace weft::kernels {

namespace {

constexpr int64_t kElements = int64_t(64) << 20;
// Chunks claimed as they come, as the products' are: a thread the OS holds back leaves its share
// to the others, as it does in the products this bounds.
constexpr int64_t kChunks = 64;

}  // namespace

// Buffers on huge pages, as the weights are: on 4 KiB pages the triad streams slower than a
// decode step then reads its weights, and the bound would be below what decode reaches.
BandwidthProbe::BandwidthProbe() : a_(kElements), b_(kElements), c_(kElements) {
    for (int64_t i = 0; i < kElements; ++i) b_[i] = 1.0f, c_[i] = 2.0f;
}

double BandwidthProbe::once() {
    float *a = a_.data(), *b = b_.data(), *c = c_.data();
    auto chunk = [&](int64_t i) {
        const int64_t lo = i * (kElements / kChunks), hi = lo + kElements / kChunks;
#pragma omp simd
        for (int64_t j = lo; j < hi; ++j) a[j] = b[j] + 0.5f * c[j];
    };
    const auto t0 = std::chrono::steady_clock::now();
    // On the products' team rather than in an OpenMP region: libgomp's threads spin on after a
    // region and take the core from the team's thread in the pass that follows (a bf16 pass
    // right after one took 1.7x as long, under libgomp's default spin).
    if (!team_for(kChunks, chunk)) omp_for(omp_get_max_threads() > 1, kChunks, chunk);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return 12.0 * double(kElements) / t;
}

double BandwidthProbe::best(double seconds) {
    return 12.0 * double(kElements) / best_time(seconds, [&] { once(); });
}

double measure_memory_bandwidth(double seconds) {
    return BandwidthProbe().best(seconds);
}

}  // namespace weft::kernels
