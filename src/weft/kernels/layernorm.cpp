#include "weft/kernels/layernorm.hpp"

#include <omp.h>

#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

// Below this many elements a parallel region costs more than the rows it would split.
constexpr int64_t kMinParallel = 1 << 15;

// Σ (x[c] - shift)² (square) or Σ (x[c] - shift) in double, in eight independent lanes: a single
// running sum is one long dependency chain the compiler may not reorder, while lanes need no
// reassociation and vectorise. Double keeps the portable path a tight yardstick for the other.
template <bool square>
double lane_sum(const float* x, int64_t C, float shift) {
    double lane[8] = {};
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
        for (int j = 0; j < 8; ++j) {
            const double d = double(x[c + j]) - shift;
            lane[j] += square ? d * d : d;
        }
    for (; c < C; ++c) {
        const double d = double(x[c]) - shift;
        lane[c % 8] += square ? d * d : d;
    }
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

void forward_row_portable(float* out, float* mean, float* rstd, const float* x, const float* w,
                          const float* b, int64_t C, float eps) {
    const float m = float(lane_sum<false>(x, C, 0.0f) / double(C));
    const float s = float(1.0 / std::sqrt(lane_sum<true>(x, C, m) / double(C) + double(eps)));
    for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

// dw and db are this thread's partial sums, reduced after all rows are done.
void backward_row_portable(float* dx, float* dw, float* db, const float* dy, const float* x,
                           const float* w, float m, float s, int64_t C) {
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = w[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
        dw[c] += norm * dy[c];
        db[c] += dy[c];
    }
    dnorm_mean /= float(C);
    dnorm_norm_mean /= float(C);
    for (int64_t c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = w[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

#if defined(__AVX512F__)
inline __mmask16 tail_mask(int64_t rest) {
    return __mmask16((1u << rest) - 1);
}

// _mm512_reduce_add_ps still trips the warning above despite the pragma (its 256-bit extract);
// shuffles within the register do not.
inline float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    __m128 x = _mm512_castps512_ps128(v);
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// Two passes over a row (mean, then Σ(x - mean)²) keep the variance accurate in fp32; a row of
// GPT-2 width sits in L1, so the second pass is nearly free.
void forward_row_avx512(float* out, float* mean, float* rstd, const float* x, const float* w,
                        const float* b, int64_t C, float eps) {
    const int64_t body = C & ~int64_t(15);
    const __mmask16 k = tail_mask(C - body);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < body; c += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + c));
    if (k) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(k, x + body));
    const float m = hsum(acc) / float(C);
    const __m512 vm = _mm512_set1_ps(m);

    acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < body; c += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + c), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    if (k) {
        const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + body), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    const float s = 1.0f / std::sqrt(hsum(acc) / float(C) + eps);
    const __m512 vs = _mm512_set1_ps(s);

    for (int64_t c = 0; c < body; c += 16) {
        const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + c), vm), vs);
        _mm512_storeu_ps(out + c,
                         _mm512_fmadd_ps(n, _mm512_loadu_ps(w + c), _mm512_loadu_ps(b + c)));
    }
    if (k) {
        const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + body), vm), vs);
        const __m512 y = _mm512_fmadd_ps(n, _mm512_maskz_loadu_ps(k, w + body),
                                         _mm512_maskz_loadu_ps(k, b + body));
        _mm512_mask_storeu_ps(out + body, k, y);
    }
    *mean = m;
    *rstd = s;
}

// One step of the first backward pass over 16 (or fewer, masked) channels starting at c.
inline void backward_accumulate(__m512& sum_dn, __m512& sum_dnn, float* dw, float* db,
                                const float* dy, const float* x, const float* w, __m512 vm,
                                __m512 vs, int64_t c, __mmask16 k) {
    const __m512 vdy = _mm512_maskz_loadu_ps(k, dy + c);
    const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), vm), vs);
    const __m512 dn = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + c), vdy);
    sum_dn = _mm512_add_ps(sum_dn, dn);
    // Masked-off lanes have dn = 0, so they add nothing even though n there is -mean·rstd.
    sum_dnn = _mm512_fmadd_ps(dn, n, sum_dnn);
    _mm512_mask_storeu_ps(dw + c, k, _mm512_fmadd_ps(n, vdy, _mm512_maskz_loadu_ps(k, dw + c)));
    _mm512_mask_storeu_ps(db + c, k, _mm512_add_ps(vdy, _mm512_maskz_loadu_ps(k, db + c)));
}

inline void backward_apply(float* dx, const float* dy, const float* x, const float* w, __m512 vm,
                           __m512 vs, __m512 dn_mean, __m512 dnn_mean, int64_t c, __mmask16 k) {
    const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), vm), vs);
    const __m512 dn =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + c), _mm512_maskz_loadu_ps(k, dy + c));
    const __m512 g = _mm512_fnmadd_ps(n, dnn_mean, _mm512_sub_ps(dn, dn_mean));
    _mm512_mask_storeu_ps(dx + c, k, _mm512_fmadd_ps(g, vs, _mm512_maskz_loadu_ps(k, dx + c)));
}

void backward_row_avx512(float* dx, float* dw, float* db, const float* dy, const float* x,
                         const float* w, float m, float s, int64_t C) {
    const int64_t body = C & ~int64_t(15);
    const __mmask16 k = tail_mask(C - body);
    const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(s);
    __m512 sum_dn = _mm512_setzero_ps(), sum_dnn = _mm512_setzero_ps();
    for (int64_t c = 0; c < body; c += 16)
        backward_accumulate(sum_dn, sum_dnn, dw, db, dy, x, w, vm, vs, c, 0xFFFF);
    if (k) backward_accumulate(sum_dn, sum_dnn, dw, db, dy, x, w, vm, vs, body, k);
    const __m512 dn_mean = _mm512_set1_ps(hsum(sum_dn) / float(C));
    const __m512 dnn_mean = _mm512_set1_ps(hsum(sum_dnn) / float(C));
    for (int64_t c = 0; c < body; c += 16)
        backward_apply(dx, dy, x, w, vm, vs, dn_mean, dnn_mean, c, 0xFFFF);
    if (k) backward_apply(dx, dy, x, w, vm, vs, dn_mean, dnn_mean, body, k);
}
#endif

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
    WEFT_PROFILE("layernorm_fwd");
    WEFT_CHECK(N >= 0 && C > 0, "layernorm_forward: shape N={} C={}, expected N >= 0 and C > 0", N,
               C);
    const bool vec = use_avx512();
    omp_for(N * C >= kMinParallel, N, [&](int64_t i) {
        float* o = out + i * C;
        const float* x = inp + i * C;
#if defined(__AVX512F__)
        if (vec) {
            forward_row_avx512(o, mean + i, rstd + i, x, weight, bias, C, eps);
            return;
        }
#endif
        forward_row_portable(o, mean + i, rstd + i, x, weight, bias, C, eps);
    });
    (void)vec;
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
    WEFT_PROFILE("layernorm_bwd");
    WEFT_CHECK(N >= 0 && C > 0, "layernorm_backward: shape N={} C={}, expected N >= 0 and C > 0", N,
               C);
    const bool vec = use_avx512();
    const bool parallel = N * C >= kMinParallel;
    // Every thread sums its own rows' dweight/dbias into a private [2, C] slab; the slabs are
    // then added in thread order, so the result is the same on every run with this thread count.
    const int max_threads = parallel ? omp_get_max_threads() : 1;
    std::vector<float> partial(size_t(max_threads) * 2 * size_t(C), 0.0f);
#pragma omp parallel if (parallel)
    {
        const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
        float* dw = partial.data() + tid * 2 * C;
        float* db = dw + C;
        for (int64_t i = N * tid / nt; i < N * (tid + 1) / nt; ++i) {
#if defined(__AVX512F__)
            if (vec) {
                backward_row_avx512(dinp + i * C, dw, db, dout + i * C, inp + i * C, weight,
                                    mean[i], rstd[i], C);
                continue;
            }
#endif
            backward_row_portable(dinp + i * C, dw, db, dout + i * C, inp + i * C, weight, mean[i],
                                  rstd[i], C);
        }
    }
    (void)vec;
    // C · threads additions: too few to be worth another parallel region.
    for (int64_t c = 0; c < C; ++c) {
        float sw = 0, sb = 0;
        for (int t = 0; t < max_threads; ++t) {
            sw += partial[size_t(t) * 2 * C + c];
            sb += partial[size_t(t) * 2 * C + C + c];
        }
        dweight[c] += sw;
        dbias[c] += sb;
    }
}

}  // namespace weft::kernels
