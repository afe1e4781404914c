#include "weft/kernels/precision.hpp"

#include <algorithm>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/column_sums.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

// Elements a thread converts at a time: 64 KiB read, 32 KiB written.
constexpr int64_t kBlock = 16384;
// Below this many elements one thread converts the whole block: waking a team costs more.
constexpr int64_t kMinParallel = 1 << 15;

void convert_portable(uint16_t* dst, const float* src, int64_t n, float scale) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(scale * src[i]);
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
constexpr bool kBf16Compiled = true;

void convert_avx512(uint16_t* dst, const float* src, int64_t n, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    const bool scaled = scale != 1.0f;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        if (scaled) lo = _mm512_mul_ps(lo, vs), hi = _mm512_mul_ps(hi, vs);
        // cvtne2ps puts its second operand in the low half.
        _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; i < n; i += 16) {
        const __mmask16 mask = __mmask16((1u << std::min<int64_t>(16, n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(mask, src + i);
        if (scaled) x = _mm512_mul_ps(x, vs);
        _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)_mm512_cvtneps_pbh(x));
    }
}
#else
constexpr bool kBf16Compiled = false;
#endif

void convert_range(uint16_t* dst, const float* src, int64_t n, float scale, bool vec) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (vec) return convert_avx512(dst, src, n, scale);
#endif
    (void)vec;
    convert_portable(dst, src, n, scale);
}

// dst[i] (+)= fp32(src[i]) for i < n: the bits shifted into the top half, exact, in a loop the
// compiler vectorises.
template <bool kAdd>
void widen_range(float* dst, const uint16_t* src, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = uint32_t(src[i]) << 16;
        float x;
        std::memcpy(&x, &u, sizeof x);
        if constexpr (kAdd)
            dst[i] += x;
        else
            dst[i] = x;
    }
}

template <bool kAdd>
void widen_blocks(float* dst, const uint16_t* src, int64_t n) {
    WEFT_CHECK(n >= 0, "widening bf16: n={}, expected n >= 0", n);
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
        widen_range<kAdd>(dst + lo, src + lo, hi - lo);
    }
}

}  // namespace

void convert_bf16_to_fp32(float* dst, const uint16_t* src, int64_t n) {
    widen_blocks<false>(dst, src, n);
}

void add_bf16_to_fp32(float* dst, const uint16_t* src, int64_t n) {
    widen_blocks<true>(dst, src, n);
}

void convert_fp32_to_bf16_sum_columns(uint16_t* dst, float* dsum, const float* src, int64_t rows,
                                      int64_t cols) {
    WEFT_CHECK(rows >= 0 && cols >= 0 && dsum,
               "convert_fp32_to_bf16_sum_columns: rows={} cols={} dsum={}", rows, cols,
               static_cast<const void*>(dsum));
    const bool vec = bf16_conversion_vectorised();
    // Each row is rounded by convert_range and then added while it is still in L1.
    detail::rows_with_column_sums(dsum, rows, cols, [&](int64_t m, float* acc) {
        const float* row = src + m * cols;
        convert_range(dst + m * cols, row, cols, 1.0f, vec);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) acc[c] += row[c];
    });
}

uint16_t fp32_to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint32_t exponent = u & 0x7f800000u;
    if (exponent == 0x7f800000u && (u & 0x007fffffu))  // NaN: keep the sign, make it quiet
        return uint16_t((u >> 16) | 0x0040u);
    if (exponent == 0) return uint16_t((u >> 16) & 0x8000u);  // zero or denormal: signed zero
    // Round to nearest even: add half an ulp of bf16, less one unless the kept lsb is odd.
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

float bf16_to_fp32(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

bool bf16_conversion_vectorised() {
    return kBf16Compiled && use_avx512();
}

void convert_fp32_to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols,
                          int64_t ld_src, float scale) {
    WEFT_CHECK(rows >= 0 && cols >= 0 && ld_src >= cols,
               "convert_fp32_to_bf16: rows={} cols={} ld_src={}, expected ld_src >= cols >= 0",
               rows, cols, ld_src);
    const bool vec = bf16_conversion_vectorised();
    const int64_t n = rows * cols;
    if (ld_src == cols || rows == 1) {  // one contiguous range, split into equal blocks
        const int64_t blocks = (n + kBlock - 1) / kBlock;
        omp_for(n >= kMinParallel, blocks, [&](int64_t b) {
            const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
            convert_range(dst + lo, src + lo, hi - lo, scale, vec);
        });
        return;
    }
    omp_for(n >= kMinParallel, rows,
            [&](int64_t r) { convert_range(dst + r * cols, src + r * ld_src, cols, scale, vec); });
}

}  // namespace weft::kernels
