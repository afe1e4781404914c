#include "weft/kernels/attend_gathered.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "weft/kernels/exp_nonpositive.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/lane_fold.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

constexpr int kLanes = 16;
// Positions whose keys and values a decode's attention asks for ahead of its dot products. A
// sequence's blocks lie anywhere in the pool, and the weights a step streams have evicted them:
// each block's run of 16 positions is a new stream that the hardware prefetchers learn only
// after its first misses. Into L2, not L1: bench_attend_gathered's cold calls took 2.1-2.2x less
// time in bf16 (1.7-1.9x in fp32) at 32 positions ahead into L2, against 1.1-1.5x into L1, and
// 16 or 64 positions ahead did no better.
constexpr int64_t kFetchAhead = 32;

// Asks for position j's key and value rows (`bytes` each) to come into L2. The empty asm keeps
// the loop: GCC 12 deletes a loop that does nothing but prefetch.
template <typename T>
inline void fetch_position(const T* key, const T* value, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) {
        asm volatile("");
        _mm_prefetch(reinterpret_cast<const char*>(key) + b, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(value) + b, _MM_HINT_T1);
    }
}

// Lane l's fused multiply-adds in increasing index, lanes past n left alone (the vector path
// multiplies masked zeros there: fma(0, 0, s) == s).
template <class Term>
float lane_sum(int64_t n, Term term) {
    float p[kLanes] = {};
    for (int64_t i0 = 0; i0 < n; i0 += kLanes)
        for (int l = 0; l < kLanes && i0 + l < n; ++l) term(p[l], i0 + l);
    return detail::fold16(p);
}

template <typename T>
void attend_portable(float* out, const float* q, const T* const* keys, const T* const* values,
                     int64_t n, int64_t HS, float scale, float* s) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
        const T* k = keys[j];
        s[j] =
            lane_sum(HS, [&](float& a, int64_t d) { a = std::fma(q[d], lanes::load(k + d), a); }) *
            scale;
        top = std::max(top, s[j]);
    }
    const float sum = lane_sum(n, [&](float& a, int64_t j) {
        s[j] = detail::exp_nonpositive_fused(s[j] - top);
        a += s[j];
    });
    std::fill(out, out + HS, 0.0f);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < HS; ++d)
            out[d] = std::fma(s[j], lanes::load(values[j] + d), out[d]);
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < HS; ++d) out[d] *= inv;
}

#if defined(__AVX512F__)
// The first min(k, 16) lanes (none for k <= 0).
inline __mmask16 first(int64_t k) {
    return k >= kLanes ? __mmask16(0xffff) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
}

template <typename T>
float dot(const float* q, const T* k, int64_t HS) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t d = 0; d < HS; d += kLanes) {
        const __mmask16 m = first(HS - d);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), lanes::load16(k + d, m), a);
    }
    return detail::fold16(a);
}

// s[0, n) := exp(s - max s) as exp_nonpositive's vector path; returns 1 / their sum, folded.
inline float softmax_avx512(float* s, int64_t n) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j]);
    const __m512 vtop = _mm512_set1_ps(top);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += kLanes) {
        const __mmask16 m = first(n - j);
        // Lanes past n are neither stored nor added: the portable loop has no such terms.
        const __m512 e =
            detail::exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vtop));
        _mm512_mask_storeu_ps(s + j, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    return 1.0f / detail::fold16(sum);
}

// out[h][0, 16 P) := sum over j of s[h][j] values[j][d0 + ...] times inv[h], for GH heads: the
// P vectors of each head stay in registers (a count known at compile time), the positions
// streamed past.
template <typename T, int GH, int P>
void weigh_values(float* out, int64_t HS, const T* const* values, int64_t d0, int64_t n,
                  const float* s, const float* inv, const __mmask16* m) {
    __m512 o[GH][P];
    for (int h = 0; h < GH; ++h)
        for (int i = 0; i < P; ++i) o[h][i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        const T* v = values[j] + d0;
        __m512 vv[P];
        for (int i = 0; i < P; ++i) vv[i] = lanes::load16(v + i * kLanes, m[i]);
        for (int h = 0; h < GH; ++h) {
            const __m512 p = _mm512_set1_ps(s[h * n + j]);
            for (int i = 0; i < P; ++i) o[h][i] = _mm512_fmadd_ps(p, vv[i], o[h][i]);
        }
    }
    for (int h = 0; h < GH; ++h) {
        const __m512 vinv = _mm512_set1_ps(inv[h]);
        for (int i = 0; i < P; ++i)
            _mm512_mask_storeu_ps(out + h * HS + i * kLanes, m[i], _mm512_mul_ps(o[h][i], vinv));
    }
}

// GH query heads (q and out: GH rows of HS) over the same keys and values, each key and value
// loaded once for all of them; every head's operations those of attend_gathered on its own.
// s: GH rows of n scores.
template <typename T, int GH>
void attend_heads_avx512(float* out, const float* q, const T* const* keys, const T* const* values,
                         int64_t n, int64_t HS, float scale, float* s) {
    // Keys and values kFetchAhead positions on, so that the weighting below finds the values
    // in L2 too.
    const int64_t bytes = HS * int64_t(sizeof(T));
    for (int64_t j = 0; j < std::min(n, kFetchAhead); ++j)
        fetch_position(keys[j], values[j], bytes);
    // Four keys' dots at once per head, folded together (reduce4 folds each as fold16 does).
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        for (int64_t a = j + kFetchAhead; a < std::min(n, j + kFetchAhead + 4); ++a)
            fetch_position(keys[a], values[a], bytes);
        __m512 a[GH][4];
        for (int h = 0; h < GH; ++h)
            for (int c = 0; c < 4; ++c) a[h][c] = _mm512_setzero_ps();
        for (int64_t d = 0; d < HS; d += kLanes) {
            const __mmask16 m = first(HS - d);
            __m512 k[4];
            for (int c = 0; c < 4; ++c) k[c] = lanes::load16(keys[j + c] + d, m);
            for (int h = 0; h < GH; ++h) {
                const __m512 qv = _mm512_maskz_loadu_ps(m, q + h * HS + d);
                for (int c = 0; c < 4; ++c) a[h][c] = _mm512_fmadd_ps(qv, k[c], a[h][c]);
            }
        }
        for (int h = 0; h < GH; ++h)
            _mm_storeu_ps(s + h * n + j,
                          _mm_mul_ps(detail::reduce4(a[h][0], a[h][1], a[h][2], a[h][3]),
                                     _mm_set1_ps(scale)));
    }
    for (; j < n; ++j)
        for (int h = 0; h < GH; ++h) s[h * n + j] = dot(q + h * HS, keys[j], HS) * scale;
    float inv[GH];
    for (int h = 0; h < GH; ++h) inv[h] = softmax_avx512(s + h * n, n);
    // HS in registers when it fits (64 floats: 4 vectors a head), the positions streamed past.
    for (int64_t d0 = 0; d0 < HS; d0 += 4 * kLanes) {
        const __mmask16 m[4] = {first(HS - d0), first(HS - d0 - kLanes),
                                first(HS - d0 - 2 * kLanes), first(HS - d0 - 3 * kLanes)};
        switch (std::min<int64_t>(4, (HS - d0 + kLanes - 1) / kLanes)) {
            case 1:
                weigh_values<T, GH, 1>(out + d0, HS, values, d0, n, s, inv, m);
                break;
            case 2:
                weigh_values<T, GH, 2>(out + d0, HS, values, d0, n, s, inv, m);
                break;
            case 3:
                weigh_values<T, GH, 3>(out + d0, HS, values, d0, n, s, inv, m);
                break;
            default:
                weigh_values<T, GH, 4>(out + d0, HS, values, d0, n, s, inv, m);
        }
    }
}

// Up to four heads a pass: 16 accumulators, four keys or values and a query or a weight fit
// the 32 registers.
template <typename T>
void attend_group_avx512(float* out, const float* q, int64_t G, const T* const* keys,
                         const T* const* values, int64_t n, int64_t HS, float scale, float* s) {
    for (int64_t h = 0; h < G; h += 4) {
        float* o = out + h * HS;
        const float* qh = q + h * HS;
        float* sh = s + h * n;
        switch (std::min<int64_t>(4, G - h)) {
            case 1:
                attend_heads_avx512<T, 1>(o, qh, keys, values, n, HS, scale, sh);
                break;
            case 2:
                attend_heads_avx512<T, 2>(o, qh, keys, values, n, HS, scale, sh);
                break;
            case 3:
                attend_heads_avx512<T, 3>(o, qh, keys, values, n, HS, scale, sh);
                break;
            default:
                attend_heads_avx512<T, 4>(o, qh, keys, values, n, HS, scale, sh);
        }
    }
}
#endif

template <typename T>
void attend_group(float* out, const float* q, int64_t G, const T* const* keys,
                  const T* const* values, int64_t n, int64_t HS, float scale, float* scores) {
#if defined(__AVX512F__)
    // bf16 keys take the vector path only where AVX512-BF16 is compiled in (lanes::load16).
    if constexpr (std::is_same_v<T, float> || lanes::kBf16Vectors)
        if (lanes::vectors<T>())
            return attend_group_avx512(out, q, G, keys, values, n, HS, scale, scores);
#endif
    for (int64_t h = 0; h < G; ++h)
        attend_portable(out + h * HS, q + h * HS, keys, values, n, HS, scale, scores + h * n);
}

}  // namespace

void attend_gathered(float* out, const float* q, const float* const* keys,
                     const float* const* values, int64_t n, int64_t HS, float scale,
                     float* scores) {
    attend_group(out, q, 1, keys, values, n, HS, scale, scores);
}

void attend_gathered(float* out, const float* q, const uint16_t* const* keys,
                     const uint16_t* const* values, int64_t n, int64_t HS, float scale,
                     float* scores) {
    attend_group(out, q, 1, keys, values, n, HS, scale, scores);
}

void attend_gathered_group(float* out, const float* q, int64_t G, const float* const* keys,
                           const float* const* values, int64_t n, int64_t HS, float scale,
                           float* scores) {
    attend_group(out, q, G, keys, values, n, HS, scale, scores);
}

void attend_gathered_group(float* out, const float* q, int64_t G, const uint16_t* const* keys,
                           const uint16_t* const* values, int64_t n, int64_t HS, float scale,
                           float* scores) {
    attend_group(out, q, G, keys, values, n, HS, scale, scores);
}

}  // namespace weft::kernels
