#include "weft/kernels/gelu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kCubic = 0.044715f;
// Elements a thread takes at a time: big enough to amortise scheduling, small enough that the
// 4096×3072 activations of GPT-2 small split evenly over many threads.
constexpr int64_t kBlock = 8192;

template <typename F>
void for_blocks(int64_t n, F&& f) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t i = 0; i < blocks; ++i) f(i * kBlock, std::min(n, (i + 1) * kBlock));
}

// Both paths use ½(1 + tanh u) = σ(2u) = 1 / (1 + e^(-2u)), the same function as GPT-2's: one exp
// instead of a tanh (glibc's tanhf is about five times slower than its expf), and no cancellation
// in 1 + tanh u for very negative inputs. When e^(-2u) overflows, σ = 0 and so are both results.
inline float sigmoid_2u(float x, float* du) {
    const float x2 = x * x;
    if (du) *du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
    return 1.0f / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kCubic * x2)));
}

void forward_portable(float* out, const float* x, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = x[i] * sigmoid_2u(x[i], nullptr);
}

// gelu'(x) = s + x · 2s(1 - s) · du/dx with s = σ(2u), since ½(1 - tanh²u) = 2s(1 - s).
void backward_portable(float* dx, const float* x, const float* dy, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
        float du;
        const float s = sigmoid_2u(x[i], &du);
        dx[i] = (s + 2.0f * x[i] * s * (1.0f - s) * du) * dy[i];
    }
}

#if defined(__AVX512F__)
inline __mmask16 tail_mask(int64_t rest) {
    return __mmask16((1u << rest) - 1);
}

// eˣ by Cody-Waite range reduction to r ∈ [-ln2/2, ln2/2] and Cephes' degree-6 polynomial
// (about 1 ulp); scalef applies 2ⁿ without the bit tricks that break at the exponent's ends.
inline __m512 exp_avx512(__m512 x) {
    // Clamping keeps eˣ finite and NaN-free for ±inf inputs; outside it GELU is saturated anyway.
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y =
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}

// σ(2u) and du/dx, as the portable sigmoid_2u.
inline __m512 sigmoid_2u(__m512 x, __m512* du) {
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 one = _mm512_set1_ps(1.0f), k = _mm512_set1_ps(kSqrt2OverPi);
    const __m512 u =
        _mm512_mul_ps(_mm512_mul_ps(k, x), _mm512_fmadd_ps(_mm512_set1_ps(kCubic), x2, one));
    if (du) *du = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kCubic), x2, one));
    const __m512 e = exp_avx512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

inline __m512 forward_vec(__m512 x) {
    return _mm512_mul_ps(x, sigmoid_2u(x, nullptr));
}

inline __m512 backward_vec(__m512 x, __m512 dy) {
    __m512 du;
    const __m512 s = sigmoid_2u(x, &du);
    const __m512 s1 = _mm512_mul_ps(s, _mm512_sub_ps(_mm512_set1_ps(1.0f), s));
    const __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_add_ps(x, x), s1), du, s);
    return _mm512_mul_ps(g, dy);
}

void forward_avx512(float* out, const float* x, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) _mm512_storeu_ps(out + i, forward_vec(_mm512_loadu_ps(x + i)));
    if (i < hi) {
        const __mmask16 k = tail_mask(hi - i);
        _mm512_mask_storeu_ps(out + i, k, forward_vec(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

// dx may alias dy: each lane reads dy before writing dx.
void backward_avx512(float* dx, const float* x, const float* dy, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        _mm512_storeu_ps(dx + i, backward_vec(_mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i)));
    if (i < hi) {
        const __mmask16 k = tail_mask(hi - i);
        const __m512 g =
            backward_vec(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, dy + i));
        _mm512_mask_storeu_ps(dx + i, k, g);
    }
}
#endif

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
    WEFT_PROFILE("gelu_fwd");
    WEFT_CHECK(n >= 0, "gelu_forward: n={}, expected n >= 0", n);
#if defined(__AVX512F__)
    if (use_avx512())
        return for_blocks(n, [=](int64_t lo, int64_t hi) { forward_avx512(out, inp, lo, hi); });
#endif
    for_blocks(n, [=](int64_t lo, int64_t hi) { forward_portable(out, inp, lo, hi); });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
    WEFT_PROFILE("gelu_bwd");
    WEFT_CHECK(n >= 0, "gelu_backward: n={}, expected n >= 0", n);
#if defined(__AVX512F__)
    if (use_avx512())
        return for_blocks(
            n, [=](int64_t lo, int64_t hi) { backward_avx512(dinp, inp, dout, lo, hi); });
#endif
    for_blocks(n, [=](int64_t lo, int64_t hi) { backward_portable(dinp, inp, dout, lo, hi); });
}

namespace {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// 16 bf16 values widened in registers (bf16 is the top half of an fp32: exact).
inline __m512 load_bf16(const uint16_t* p, __mmask16 k = 0xffff) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

void forward_bf16_avx512(uint16_t* out, const uint16_t* x, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            (__m256i)_mm512_cvtneps_pbh(forward_vec(load_bf16(x + i))));
    if (i < hi) {
        const __mmask16 k = tail_mask(hi - i);
        _mm256_mask_storeu_epi16(out + i, k,
                                 (__m256i)_mm512_cvtneps_pbh(forward_vec(load_bf16(x + i, k))));
    }
}

void backward_bf16_avx512(float* dx, const uint16_t* x, const float* dy, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        _mm512_storeu_ps(dx + i, backward_vec(load_bf16(x + i), _mm512_loadu_ps(dy + i)));
    if (i < hi) {
        const __mmask16 k = tail_mask(hi - i);
        _mm512_mask_storeu_ps(dx + i, k,
                              backward_vec(load_bf16(x + i, k), _mm512_maskz_loadu_ps(k, dy + i)));
    }
}
constexpr bool kBf16Kernels = true;
#else
constexpr bool kBf16Kernels = false;
#endif

// Elsewhere: each block widened into a buffer on the thread's stack (32 KiB, so it stays in L1)
// and handed to f(widened, lo, hi).
template <typename F>
void for_widened_blocks(const uint16_t* inp, int64_t n, F&& f) {
    for_blocks(n, [&](int64_t lo, int64_t hi) {
        float x[kBlock];
        for (int64_t i = lo; i < hi; ++i) x[i - lo] = bf16_to_fp32(inp[i]);
        f(static_cast<float*>(x), lo, hi);
    });
}

}  // namespace

void gelu_forward_bf16(uint16_t* out, const uint16_t* inp, int64_t n) {
    WEFT_PROFILE("gelu_fwd");
    WEFT_CHECK(n >= 0, "gelu_forward_bf16: n={}, expected n >= 0", n);
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (kBf16Kernels && bf16_conversion_vectorised())
        return for_blocks(n,
                          [=](int64_t lo, int64_t hi) { forward_bf16_avx512(out, inp, lo, hi); });
#endif
    for_widened_blocks(inp, n, [=](float* x, int64_t lo, int64_t hi) {
        forward_portable(x, x, 0, hi - lo);
        for (int64_t i = lo; i < hi; ++i) out[i] = fp32_to_bf16(x[i - lo]);
    });
}

void gelu_backward_bf16_input(float* dinp, const uint16_t* inp, const float* dout, int64_t n) {
    WEFT_PROFILE("gelu_bwd");
    WEFT_CHECK(n >= 0, "gelu_backward_bf16_input: n={}, expected n >= 0", n);
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (kBf16Kernels && bf16_conversion_vectorised())
        return for_blocks(
            n, [=](int64_t lo, int64_t hi) { backward_bf16_avx512(dinp, inp, dout, lo, hi); });
#endif
    // The block's x is at x[0], its dout and dinp at lo.
    for_widened_blocks(inp, n, [=](float* x, int64_t lo, int64_t hi) {
        backward_portable(dinp + lo, x, dout + lo, 0, hi - lo);
    });
}

}  // namespace weft::kernels
