#include "weft/kernels/gelu.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "weft/core/error.hpp"
#include "weft/kernels/column_sums.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/omp_for.hpp"
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
    omp_for(blocks > 1, blocks, [&](int64_t i) { f(i * kBlock, std::min(n, (i + 1) * kBlock)); });
}

// Both paths use ½(1 + tanh u) = σ(2u) = 1 / (1 + e^(-2u)), the same function as GPT-2's: one exp
// instead of a tanh (glibc's tanhf is about five times slower than its expf), and no cancellation
// in 1 + tanh u for very negative inputs. When e^(-2u) overflows, σ = 0 and so are both results.
inline float sigmoid_2u(float x, float* du) {
    const float x2 = x * x;
    if (du) *du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
    return 1.0f / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kCubic * x2)));
}

template <typename In, typename Out>
void forward_portable(Out* out, const In* x, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
        const float xi = lanes::load(x + i);
        lanes::store(out + i, xi * sigmoid_2u(xi, nullptr));
    }
}

// gelu'(x) = s + x · 2s(1 - s) · du/dx with s = σ(2u), since ½(1 - tanh²u) = 2s(1 - s).
inline float backward_scalar(float x, float dy) {
    float du;
    const float s = sigmoid_2u(x, &du);
    return (s + 2.0f * x * s * (1.0f - s) * du) * dy;
}

// The backward over [lo, hi), written as Out (float, or bf16 rounded); given acc, the unrounded
// gradient is also added into acc[i - lo] (gelu_backward_bf16's bias sums).
template <typename In, typename Out>
void backward_portable(Out* dx, const In* x, const float* dy, int64_t lo, int64_t hi,
                       float* acc = nullptr) {
    for (int64_t i = lo; i < hi; ++i) {
        const float g = backward_scalar(lanes::load(x + i), dy[i]);
        lanes::store(dx + i, g);
        if (acc) acc[i - lo] += g;
    }
}

#if defined(__AVX512F__)
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

template <typename In, typename Out>
void forward_avx512(Out* out, const In* x, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) lanes::store16(out + i, forward_vec(lanes::load16(x + i)));
    if (i < hi) {
        const __mmask16 k = lanes::tail_mask(hi - i);
        lanes::store16(out + i, forward_vec(lanes::load16(x + i, k)), k);
    }
}

// As backward_portable. dx may alias dy: each lane reads dy before writing dx.
template <typename In, typename Out>
void backward_avx512(Out* dx, const In* x, const float* dy, int64_t lo, int64_t hi,
                     float* acc = nullptr) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        const __m512 g = backward_vec(lanes::load16(x + i), lanes::load16(dy + i));
        lanes::store16(dx + i, g);
        if (acc) lanes::store16(acc + (i - lo), _mm512_add_ps(lanes::load16(acc + (i - lo)), g));
    }
    if (i < hi) {
        const __mmask16 k = lanes::tail_mask(hi - i);
        const __m512 g = backward_vec(lanes::load16(x + i, k), lanes::load16(dy + i, k));
        lanes::store16(dx + i, g, k);
        if (acc)
            lanes::store16(acc + (i - lo), _mm512_add_ps(lanes::load16(acc + (i - lo), k), g), k);
    }
}
#endif

}  // namespace

namespace {

// The forward on In, written as Out, and the backward on In: the 16-lane path where
// lanes::vectors allows it for the bf16 side, else the portable loop.
template <typename In, typename Out>
void forward(Out* out, const In* inp, int64_t n) {
    WEFT_CHECK(n >= 0, "gelu_forward: n={}, expected n >= 0", n);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Out, float> || lanes::kBf16Vectors) {
        if (lanes::vectors<Out>())
            return for_blocks(n, [=](int64_t lo, int64_t hi) { forward_avx512(out, inp, lo, hi); });
    }
#endif
    for_blocks(n, [=](int64_t lo, int64_t hi) { forward_portable(out, inp, lo, hi); });
}

template <typename In>
void backward(float* dinp, const In* inp, const float* dout, int64_t n) {
    WEFT_CHECK(n >= 0, "gelu_backward: n={}, expected n >= 0", n);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<In, float> || lanes::kBf16Vectors) {
        if (lanes::vectors<In>())
            return for_blocks(
                n, [=](int64_t lo, int64_t hi) { backward_avx512(dinp, inp, dout, lo, hi); });
    }
#endif
    for_blocks(n, [=](int64_t lo, int64_t hi) { backward_portable(dinp, inp, dout, lo, hi); });
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
    WEFT_PROFILE("gelu_fwd");
    forward(out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
    WEFT_PROFILE("gelu_bwd");
    backward(dinp, inp, dout, n);
}

void gelu_backward_bias(float* dinp, float* dbias, const float* inp, const float* dout,
                        int64_t rows, int64_t cols) {
    WEFT_PROFILE("gelu_bwd");
    WEFT_CHECK(rows >= 0 && cols >= 0, "gelu_backward_bias: rows={} cols={}", rows, cols);
    const bool vec = use_avx512();
    detail::rows_with_column_sums(dbias, rows, cols, [&](int64_t m, float* acc) {
        float* d = dinp + m * cols;
        const float* x = inp + m * cols;
        const float* dy = dout + m * cols;
#if defined(__AVX512F__)
        if (vec) return backward_avx512(d, x, dy, 0, cols, acc);
#endif
        backward_portable(d, x, dy, 0, cols, acc);
    });
    (void)vec;
}

void gelu_forward_bf16(uint16_t* out, const uint16_t* inp, int64_t n) {
    WEFT_PROFILE("gelu_fwd");
    forward(out, inp, n);
}

void gelu_backward_bf16_input(float* dinp, const uint16_t* inp, const float* dout, int64_t n) {
    WEFT_PROFILE("gelu_bwd");
    backward(dinp, inp, dout, n);
}

void gelu_backward_bf16(uint16_t* dinp, float* dbias, const uint16_t* inp, const float* dout,
                        int64_t rows, int64_t cols) {
    WEFT_PROFILE("gelu_bwd");
    WEFT_CHECK(rows >= 0 && cols >= 0, "gelu_backward_bf16: rows={} cols={}", rows, cols);
    const bool vec = lanes::vectors<uint16_t>();
    detail::rows_with_column_sums(dbias, rows, cols, [&](int64_t m, float* acc) {
        uint16_t* d = dinp + m * cols;
        const uint16_t* x = inp + m * cols;
        const float* dy = dout + m * cols;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
        if (vec) return backward_avx512(d, x, dy, 0, cols, acc);
#endif
        backward_portable(d, x, dy, 0, cols, acc);
    });
}

}  // namespace weft::kernels
