#include "weft/kernels/add_transposed.hpp"

#include <algorithm>

#include "weft/kernels/isa.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

// Square blocks of kEdge: a block's source rows and destination rows both stay in L1 while it
// is transposed, whichever of the two has the long stride.
constexpr int64_t kEdge = 16;

void block_portable(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                    int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * ldd + c] += src[c * lds + r];
}

#if defined(__AVX512F__)
// A whole 16×16 block: sixteen source rows loaded, transposed in registers, added to sixteen
// destination rows.
void block_avx512(float* dst, int64_t ldd, const float* src, int64_t lds) {
    __m512i z[16];
    for (int i = 0; i < 16; ++i) z[i] = _mm512_castps_si512(_mm512_loadu_ps(src + i * lds));
    lanes::transpose16x16(z);
    for (int i = 0; i < 16; ++i) {
        float* d = dst + i * ldd;
        _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), _mm512_castsi512_ps(z[i])));
    }
}
#endif

}  // namespace

void add_transposed(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                    int64_t cols) {
    const bool vec = use_avx512();
    const int64_t blocks = (rows + kEdge - 1) / kEdge;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t r0 = b * kEdge, nr = std::min(kEdge, rows - r0);
        for (int64_t c0 = 0; c0 < cols; c0 += kEdge) {
            const int64_t nc = std::min(kEdge, cols - c0);
            float* d = dst + r0 * ldd + c0;
            const float* s = src + c0 * lds + r0;
#if defined(__AVX512F__)
            if (vec && nr == kEdge && nc == kEdge) {
                block_avx512(d, ldd, s, lds);
                continue;
            }
#endif
            block_portable(d, ldd, s, lds, nr, nc);
        }
    }
    (void)vec;
}

}  // namespace weft::kernels
