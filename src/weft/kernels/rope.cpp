#include "weft/kernels/rope.hpp"

#include <cmath>
#include <numbers>

#include "weft/core/error.hpp"
#include "weft/kernels/omp_for.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
    WEFT_CHECK(head_dim > 0 && head_dim % 2 == 0 && theta > 0,
               "rope: head_dim {} must be positive and even, theta {} positive", head_dim, theta);
    const int64_t half = head_dim / 2;
    std::vector<double> f(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) f[size_t(i)] = std::pow(theta, -double(2 * i) / head_dim);
    switch (s.kind) {
        case RopeScaling::Kind::none:
            break;
        case RopeScaling::Kind::linear:
            for (double& x : f) x /= s.factor;
            break;
        case RopeScaling::Kind::llama3: {
            const double old = double(s.original_max_position);
            const double low_wavelen = old / s.low_freq_factor;
            const double high_wavelen = old / s.high_freq_factor;
            for (double& x : f) {
                const double wavelen = 2 * std::numbers::pi / x;
                if (wavelen > low_wavelen) {
                    x /= s.factor;  // long wavelengths: scaled
                } else if (wavelen >= high_wavelen) {
                    const double smooth = (old / wavelen - s.low_freq_factor) /
                                          (s.high_freq_factor - s.low_freq_factor);
                    x = (1 - smooth) * x / s.factor + smooth * x;
                }  // short wavelengths: kept
            }
            break;
        }
    }
    return f;
}

RopeTable rope_table(int64_t head_dim, int64_t positions, double theta, const RopeScaling& s) {
    WEFT_CHECK(positions >= 0, "rope_table: positions {} must not be negative", positions);
    const std::vector<double> f = rope_inv_freq(head_dim, theta, s);
    RopeTable t;
    t.positions = positions;
    t.half = head_dim / 2;
    t.cos.resize(size_t(positions * t.half));
    t.sin.resize(size_t(positions * t.half));
#pragma omp parallel for schedule(static) if (positions * t.half >= (1 << 15))
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < t.half; ++i) {
            const double a = double(p) * f[size_t(i)];
            t.cos[size_t(p * t.half + i)] = float(std::cos(a));
            t.sin[size_t(p * t.half + i)] = float(std::sin(a));
        }
    return t;
}

namespace {

// sign = +1 rotates forward, -1 backward (the transpose of the rotation).
void rotate(float* x, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld, int64_t pos0,
            const RopeTable& table, float sign) {
    const int64_t half = HS / 2;
    WEFT_CHECK(half == table.half && pos0 >= 0 && pos0 + T <= table.positions,
               "rope: positions {}..{} of head size {}, but the table holds {} positions of head "
               "size {}",
               pos0, pos0 + T, HS, table.positions, 2 * table.half);
    omp_for(B * T * nheads * HS >= (1 << 15), B * T, [&](int64_t bt) {
        const int64_t t = bt % T;
        const float* c = table.cos.data() + (pos0 + t) * half;
        const float* s = table.sin.data() + (pos0 + t) * half;
        float* row = x + bt * ld;
        for (int64_t h = 0; h < nheads; ++h) {
            float* lo = row + h * HS;
            float* hi = lo + half;
            for (int64_t i = 0; i < half; ++i) {
                const float a = lo[i], z = hi[i], si = sign * s[i];
                lo[i] = a * c[i] - z * si;
                hi[i] = z * c[i] + a * si;
            }
        }
    });
}

}  // namespace

void rope_forward(float* x, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld,
                  int64_t pos0, const RopeTable& table) {
    WEFT_PROFILE("rope_fwd");
    rotate(x, B, T, nheads, HS, ld, pos0, table, 1.0f);
}

void rope_backward(float* dx, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld,
                   int64_t pos0, const RopeTable& table) {
    WEFT_PROFILE("rope_bwd");
    rotate(dx, B, T, nheads, HS, ld, pos0, table, -1.0f);
}

}  // namespace weft::kernels
