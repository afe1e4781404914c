#pragma once
// Column sums of a [rows, cols] matrix a kernel produces row by row: a bias gradient summed while
// the kernel writes the gradient it sums (GPT-2's products under --dtype bf16). Rows are summed
// over fixed blocks of kRowBlock, then the blocks in order, so the sums are the same bits on any
// number of threads, and each thread streams whole rows: bias_backward's column bands, strided
// rows in each, outran the prefetchers (5x slower for GPT-2's fc, 4096 x 3072).
#include <algorithm>
#include <cstdint>
#include <vector>

namespace weft::kernels::detail {

inline constexpr int64_t kRowBlock = 64;

// Runs row(m, acc) for every row m < rows, blocks of rows in parallel, where acc (cols floats,
// zeroed per block) collects the block's sums, or is null when dsum is; then dsum[c] += the
// blocks' sums in block order.
template <class Row>
void rows_with_column_sums(float* dsum, int64_t rows, int64_t cols, Row&& row) {
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    // The blocks' sums (GPT-2's fc: 64 blocks of 3072, 768 KB), kept between calls.
    thread_local std::vector<float> partial;
    if (dsum) partial.assign(size_t(blocks * cols), 0.0f);
    float* sums = dsum ? partial.data() : nullptr;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t b = 0; b < blocks; ++b)
        for (int64_t m = b * kRowBlock; m < std::min(rows, (b + 1) * kRowBlock); ++m)
            row(m, sums ? sums + b * cols : nullptr);
    if (!dsum) return;
    constexpr int64_t kBand = 256;
#pragma omp parallel for schedule(static) if (blocks * cols > (1 << 16))
    for (int64_t c0 = 0; c0 < cols; c0 += kBand) {
        const int64_t c1 = std::min(cols, c0 + kBand);
        float acc[kBand] = {};
        for (int64_t b = 0; b < blocks; ++b)
            for (int64_t c = c0; c < c1; ++c) acc[c - c0] += sums[b * cols + c];
        for (int64_t c = c0; c < c1; ++c) dsum[c] += acc[c - c0];
    }
}

}  // namespace weft::kernels::detail
