#include "weft/kernels/swiglu.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "weft/core/error.hpp"
#include "weft/kernels/exp_nonpositive.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/lanes.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

constexpr int64_t kMinParallel = 1 << 15;

// The logistic function from e = exp(-|g|) only, so nothing overflows: σ(g) = 1 / (1 + e) for
// g >= 0 and e / (1 + e) below. exp_nonpositive is the softmax's: both paths take the same
// exponential, and past e^-60 σ is exactly 0 or 1.
inline float sigmoid(float g) {
    const float e = detail::exp_nonpositive(-std::abs(g));
    return (g >= 0 ? 1.0f : e) / (1.0f + e);
}

#if defined(__AVX512F__)
// σ(g) from e = exp(-|g|), as sigmoid() does, 16 lanes at a time.
inline __m512 sigmoid16(__m512 g) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = detail::exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __mmask16 pos = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_div_ps(_mm512_mask_blend_ps(pos, e, one), _mm512_add_ps(one, e));
}

// silu(g) · u, 16 lanes: the one expression of both forward paths' vectors.
inline __m512 swiglu16(__m512 g, __m512 u) {
    return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(g)), u);
}
#endif

// silu(g) · u: the one expression of both forward paths' scalars.
inline float swiglu1(float g, float u) {
    return g * sigmoid(g) * u;
}

template <typename In, typename Out>
void forward_row(Out* y, const In* g, const In* u, int64_t F, bool vec) {
    int64_t j = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Out, float> || lanes::kBf16Vectors) {
        if (vec)
            for (; j + 16 <= F; j += 16)
                lanes::store16(y + j, swiglu16(lanes::load16(g + j), lanes::load16(u + j)));
    }
#endif
    (void)vec;
    for (; j < F; ++j) lanes::store(y + j, swiglu1(lanes::load(g + j), lanes::load(u + j)));
}

// d silu(g)/dg = s (1 + g (1 - s)). Out is float, or bf16 (the fp32 result rounded).
template <typename In, typename Out>
void backward_row(Out* dg, Out* du, const float* dy, const In* g, const In* u, int64_t F,
                  bool vec) {
    int64_t j = 0;
#if defined(__AVX512F__)
    if constexpr ((std::is_same_v<In, float> && std::is_same_v<Out, float>) ||
                  lanes::kBf16Vectors) {
        const __m512 one = _mm512_set1_ps(1.0f);
        if (vec)
            for (; j + 16 <= F; j += 16) {
                const __m512 gv = lanes::load16(g + j), dyv = _mm512_loadu_ps(dy + j);
                const __m512 s = sigmoid16(gv);
                const __m512 dsilu =
                    _mm512_mul_ps(s, _mm512_fmadd_ps(gv, _mm512_sub_ps(one, s), one));
                lanes::store16(dg + j,
                               _mm512_mul_ps(_mm512_mul_ps(dyv, lanes::load16(u + j)), dsilu));
                lanes::store16(du + j, _mm512_mul_ps(dyv, _mm512_mul_ps(gv, s)));
            }
    }
#endif
    (void)vec;
    for (; j < F; ++j) {
        const float gj = lanes::load(g + j), uj = lanes::load(u + j);
        const float s = sigmoid(gj);
        lanes::store(dg + j, dy[j] * uj * s * (1.0f + gj * (1.0f - s)));
        lanes::store(du + j, dy[j] * gj * s);
    }
}

template <typename In, typename Out>
void forward(Out* out, const In* gu, int64_t N, int64_t F) {
    WEFT_CHECK(N >= 0 && F > 0, "swiglu_forward: shape N={} F={}, expected N >= 0 and F > 0", N, F);
    const bool vec = lanes::vectors<Out>();
    omp_for(N * F >= kMinParallel, N, [&](int64_t i) {
        forward_row(out + i * F, gu + i * 2 * F, gu + i * 2 * F + F, F, vec);
    });
}

template <typename In, typename Out>
void backward(Out* dgu, const float* dout, const In* gu, int64_t N, int64_t F) {
    WEFT_CHECK(N >= 0 && F > 0, "swiglu_backward: shape N={} F={}, expected N >= 0 and F > 0", N,
               F);
    const bool vec = std::is_same_v<Out, float> ? lanes::vectors<In>() : lanes::vectors<Out>();
#pragma omp parallel for schedule(static) if (N * F >= kMinParallel)
    for (int64_t i = 0; i < N; ++i)
        backward_row(dgu + i * 2 * F, dgu + i * 2 * F + F, dout + i * F, gu + i * 2 * F,
                     gu + i * 2 * F + F, F, vec);
}

}  // namespace

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
    WEFT_PROFILE("swiglu_fwd");
    forward(out, gu, N, F);
}

void swiglu_forward_cols(float* out, int64_t ldo, const float* gu, int64_t ldgu, int64_t M,
                         int64_t F, int64_t c0, int64_t c1) {
    WEFT_CHECK(0 <= c0 && c0 <= c1 && c1 <= F, "swiglu_forward_cols: columns [{}, {}) of F={}", c0,
               c1, F);
    // forward_row's split: the vector path up to the last whole vector of the row, when taken.
#if defined(__AVX512F__)
    const int64_t whole = lanes::vectors<float>() ? F / 16 * 16 : 0;
#else
    const int64_t whole = 0;
#endif
    const int64_t vec_end = std::max(c0, std::min(c1, whole));
    for (int64_t m = 0; m < M; ++m) {
        float* y = out + m * ldo;
        const float* g = gu + m * ldgu;
        const float* u = g + F;
#if defined(__AVX512F__)
        // Lane by lane forward_row's whole vectors: a mask only leaves lanes out.
        for (int64_t j = c0; j < vec_end; j += 16) {
            const __mmask16 k = __mmask16((1u << std::min<int64_t>(16, vec_end - j)) - 1);
            _mm512_mask_storeu_ps(
                y + j, k,
                swiglu16(_mm512_maskz_loadu_ps(k, g + j), _mm512_maskz_loadu_ps(k, u + j)));
        }
#endif
        for (int64_t j = vec_end; j < c1; ++j) y[j] = swiglu1(g[j], u[j]);
    }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
    WEFT_PROFILE("swiglu_bwd");
    backward(dgu, dout, gu, N, F);
}

void swiglu_forward_bf16(uint16_t* out, const uint16_t* gu, int64_t N, int64_t F) {
    WEFT_PROFILE("swiglu_fwd");
    forward(out, gu, N, F);
}

void swiglu_backward_bf16_input(float* dgu, const float* dout, const uint16_t* gu, int64_t N,
                                int64_t F) {
    WEFT_PROFILE("swiglu_bwd");
    backward(dgu, dout, gu, N, F);
}

void swiglu_backward_bf16(uint16_t* dgu, const float* dout, const uint16_t* gu, int64_t N,
                          int64_t F) {
    WEFT_PROFILE("swiglu_bwd");
    backward(dgu, dout, gu, N, F);
}

}  // namespace weft::kernels
