#pragma once
// `weft bench rows`: matmul_rows and matmul_rows_bf16 over a model's whole set of linear layers
// (SmolLM-135M's shapes by default), M rows at a time, as a serving step multiplies them: decode
// (M = 1) is bound by reading the weights, a prompt chunk (M = 512) by the arithmetic.
#include <cstdint>
#include <string>
#include <vector>

#include "weft/kernels/memory_bandwidth.hpp"

namespace weft::kernels {

struct RowsBenchShape {
    int64_t n_layer = 30, n_embd = 576, kv_dim = 192, hidden = 1536, vocab = 49152;
};

struct RowsBenchPoint {
    std::string dtype;        // fp32 or bf16
    int64_t rows = 0;         // M
    double seconds = 0;       // one pass over every layer, best of repetitions
    double cpu_seconds = 0;   // the process's CPU time per pass, mean over every pass timed
    double flops = 0;         // 2 · M · weights
    double weight_bytes = 0;  // the weights one pass reads
    double bandwidth = 0;     // bytes/s: the best triad between this point's passes (0: none run)
};

// One point per dtype in `dtypes` ("fp32", "bf16") and M in `rows`, each timed for about
// `seconds`. The weights are random, allocated once per dtype (fp32: 4 bytes a weight). With a
// `probe`, one triad runs before every pass (untimed in it): each point's bandwidth and its passes
// are best-ofs over the same seconds.
std::vector<RowsBenchPoint> bench_matmul_rows(const RowsBenchShape& shape,
                                              const std::vector<std::string>& dtypes,
                                              const std::vector<int64_t>& rows, double seconds,
                                              BandwidthProbe* probe = nullptr);

}  // namespace weft::kernels
