#include "weft/kernels/distill_rows.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "weft/kernels/softmax_rows.hpp"

namespace weft::kernels {

namespace {

struct Tempered {
    float max, sum;
};

// exp(row / t - max) into out (softmax(row / t) times the sum), with max the largest row / t.
Tempered tempered_exp(float* out, const float* row, int64_t V, float t,
                      const detail::SoftmaxRowOps& ops) {
    std::memcpy(out, row, size_t(V) * sizeof(float));
    if (t != 1.0f) ops.scale(out, V, 1.0f / t);
    const float max = ops.max(out, V);
    return {max, ops.exp_sum(out, V, max, true)};
}

}  // namespace

void distill_rows(float* logits, float* loss, const int32_t* targets, const float* teacher,
                  int64_t r, int64_t V, float scale, bool grad, float weight, float temperature) {
    const detail::SoftmaxRowOps ops = detail::softmax_row_ops();
    const float t = temperature, hard = 1.0f - weight;
#pragma omp parallel
    {
        std::vector<float> p(static_cast<size_t>(V)),
            q(static_cast<size_t>(V));  // the teacher's and student's exp(x / t)
#pragma omp for schedule(static)
        for (int64_t i = 0; i < r; ++i) {
            float* z = logits + i * V;
            const float* u = teacher + i * V;
            const int32_t target = targets[i];
            if (target < 0) {
                if (grad) std::memset(z, 0, size_t(V) * sizeof(float));
                if (loss) loss[i] = 0.0f;
                continue;
            }
            const Tempered pt = tempered_exp(p.data(), u, V, t, ops);
            // KL(p || q) = Σ p (log p - log q), with log p = u / t - p's max - log p's sum and
            // log q likewise: one sum of p (u - z) and no logarithm per element.
            double dot = 0;
            for (int64_t v = 0; v < V; ++v) dot += double(p[size_t(v)]) * double(u[v] - z[v]);
            const Tempered qt = tempered_exp(q.data(), z, V, t, ops);
            const float ps = pt.sum, qs = qt.sum;
            const double kl = dot / double(ps) / double(t) + double(qt.max) - double(pt.max) +
                              std::log(double(qs)) - std::log(double(ps));
            double l = double(weight) * double(t) * double(t) * kl;
            float zs = 1.0f;  // Σ exp(z - zmax), when the hard part needs it
            if (hard != 0.0f) {
                const float zt = z[target];  // read before the exponentials overwrite it
                const float zmax = ops.max(z, V);
                zs = ops.exp_sum(z, V, zmax, grad);
                l += double(hard) * (std::log(double(zs)) + double(zmax) - double(zt));
            }
            if (loss) loss[i] = float(l);
            if (!grad) continue;
            const float kh = scale * hard / zs, kq = scale * weight * t / qs,
                        kp = scale * weight * t / ps;
            for (int64_t v = 0; v < V; ++v)
                z[v] = (hard != 0.0f ? kh * z[v] : 0.0f) + kq * q[size_t(v)] - kp * p[size_t(v)];
            z[target] -= scale * hard;
        }
    }
}

}  // namespace weft::kernels
