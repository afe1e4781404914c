#include "weft/kernels/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

// Elements a thread takes at a time: five streams of 16 KiB each stay within L1/L2.
constexpr int64_t kBlock = 4096;

// Per-call constants, bias corrections computed once in double (β^t for large t underflows
// gracefully there).
struct Coeffs {
    float lr, b1, b2, one_minus_b1, one_minus_b2, inv_bc1, inv_bc2, eps, wd, gs;
};

Coeffs make_coeffs(const AdamWParams& p) {
    const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
    const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
    return {p.lr,           p.beta1,          p.beta2,          1.0f - p.beta1,
            1.0f - p.beta2, float(1.0 / bc1), float(1.0 / bc2), p.eps,
            p.weight_decay, p.grad_scale};
}

void update_portable(float* w, const float* grad, float* m, float* v, int64_t lo, int64_t hi,
                     const Coeffs& k) {
    for (int64_t i = lo; i < hi; ++i) {
        const float g = grad[i] * k.gs;
        m[i] = k.b1 * m[i] + k.one_minus_b1 * g;
        v[i] = k.b2 * v[i] + k.one_minus_b2 * g * g;
        const float mhat = m[i] * k.inv_bc1;
        const float vhat = v[i] * k.inv_bc2;
        w[i] -= k.lr * (mhat / (std::sqrt(vhat) + k.eps) + k.wd * w[i]);
    }
}

#if defined(__AVX512F__)
inline void update_vec(float* w, const float* grad, float* m, float* v, int64_t i, __mmask16 mask,
                       const Coeffs& k) {
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), _mm512_set1_ps(k.gs));
    __m512 vm = _mm512_mul_ps(_mm512_set1_ps(k.b1), _mm512_maskz_loadu_ps(mask, m + i));
    vm = _mm512_fmadd_ps(_mm512_set1_ps(k.one_minus_b1), g, vm);
    __m512 vv = _mm512_mul_ps(_mm512_set1_ps(k.b2), _mm512_maskz_loadu_ps(mask, v + i));
    vv = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(k.one_minus_b2), g), g, vv);
    const __m512 mhat = _mm512_mul_ps(vm, _mm512_set1_ps(k.inv_bc1));
    const __m512 vhat = _mm512_mul_ps(vv, _mm512_set1_ps(k.inv_bc2));
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(vhat), _mm512_set1_ps(k.eps));
    const __m512 vw = _mm512_maskz_loadu_ps(mask, w + i);
    const __m512 step = _mm512_fmadd_ps(_mm512_set1_ps(k.wd), vw, _mm512_div_ps(mhat, den));
    _mm512_mask_storeu_ps(m + i, mask, vm);
    _mm512_mask_storeu_ps(v + i, mask, vv);
    _mm512_mask_storeu_ps(w + i, mask, _mm512_fnmadd_ps(_mm512_set1_ps(k.lr), step, vw));
}

void update_avx512(float* w, const float* grad, float* m, float* v, int64_t lo, int64_t hi,
                   const Coeffs& k) {
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) update_vec(w, grad, m, v, i, 0xFFFF, k);
    if (i < hi) update_vec(w, grad, m, v, i, __mmask16((1u << (hi - i)) - 1), k);
}
#endif

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p) {
    WEFT_PROFILE("adamw");
    WEFT_CHECK(n >= 0, "adamw_update: n={}, expected n >= 0", n);
    WEFT_CHECK(p.step >= 1, "adamw_update: step={}, expected a 1-based step >= 1", p.step);
    WEFT_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1,
               "adamw_update: beta1={} beta2={}, expected both in [0, 1)", p.beta1, p.beta2);
    const Coeffs k = make_coeffs(p);
#if defined(__AVX512F__)
    const bool vec = kernel_isa() == Isa::avx512;
#else
    const bool vec = false;
#endif
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
#if defined(__AVX512F__)
        if (vec) {
            update_avx512(param, grad, m, v, lo, hi, k);
            continue;
        }
#endif
        update_portable(param, grad, m, v, lo, hi, k);
    }
    (void)vec;
}

}  // namespace weft::kernels
