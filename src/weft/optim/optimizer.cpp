#include "weft/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/adamw.hpp"

namespace weft::optim {

void OptimConfig::validate() const {
    WEFT_CHECK(lr > 0, "--lr must be positive, got {}", lr);
    WEFT_CHECK(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got {}", beta1);
    WEFT_CHECK(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got {}", beta2);
    WEFT_CHECK(eps > 0, "eps must be positive, got {}", eps);
    WEFT_CHECK(weight_decay >= 0, "--weight-decay must be non-negative, got {}", weight_decay);
    WEFT_CHECK(grad_clip >= 0, "--grad-clip must be non-negative (0 disables), got {}", grad_clip);
    WEFT_CHECK(lr_schedule == "cosine" || lr_schedule == "constant",
               "--lr-schedule must be 'cosine' or 'constant', got '{}'", lr_schedule);
    WEFT_CHECK(warmup >= 0, "--warmup must be non-negative, got {}", warmup);
    WEFT_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1], got {}",
               min_lr_ratio);
}

float learning_rate(const OptimConfig& c, int64_t step, int64_t total) {
    if (step < c.warmup) return c.lr * float(step + 1) / float(c.warmup);
    if (c.lr_schedule == "constant") return c.lr;
    const int64_t decay_steps = std::max<int64_t>(1, total - c.warmup - 1);
    const double progress = std::min(1.0, double(step - c.warmup) / double(decay_steps));
    const double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
    const double min_lr = c.lr * c.min_lr_ratio;
    return float(min_lr + coeff * (c.lr - min_lr));
}

float clip_scale(const OptimConfig& c, double grad_norm) {
    if (c.grad_clip <= 0 || grad_norm <= c.grad_clip || !std::isfinite(grad_norm)) return 1.0f;
    return float(c.grad_clip / (grad_norm + 1e-6));
}

AdamW::AdamW(const model::ParamLayout& layout, int64_t begin, int64_t end, bool offloaded)
    : begin_(begin), end_(end), m_(offloaded ? 0 : end - begin), v_(offloaded ? 0 : end - begin) {
    WEFT_CHECK(begin >= 0 && begin <= end && end <= layout.total,
               "internal: optimizer range [{}, {}) outside the buffer of {}", begin, end,
               layout.total);
    // Decay applies tensor by tensor; alignment padding between tensors counts as no-decay
    // (it is zero and stays zero).
    int64_t cursor = begin;
    for (const auto& t : layout.tensors) {
        int64_t b = std::max(begin, t.offset), e = std::min(end, t.offset + t.numel_stored);
        if (b >= e) continue;
        if (b > cursor) segments_.push_back({cursor - begin, b - begin, false});
        segments_.push_back({b - begin, e - begin, t.decay});
        cursor = e;
    }
    if (cursor < end) segments_.push_back({cursor - begin, end - begin, false});
}

void AdamW::step(float* params, const float* grads, const OptimConfig& c, float lr,
                 float grad_scale, int64_t t) {
    WEFT_CHECK(m_.size() == end_ - begin_, "internal: AdamW::step on offloaded moments");
    step_range(0, end_ - begin_, params, grads, m_.data(), v_.data(), c, lr, grad_scale, t);
}

void AdamW::step_range(int64_t a, int64_t b, float* params, const float* grads, float* m, float* v,
                       const OptimConfig& c, float lr, float grad_scale, int64_t t) const {
    for (const Segment& s : segments_) {
        const int64_t lo = std::max(a, s.begin), hi = std::min(b, s.end);
        if (lo >= hi) continue;
        kernels::AdamWParams p;
        p.lr = lr;
        p.beta1 = c.beta1;
        p.beta2 = c.beta2;
        p.eps = c.eps;
        p.weight_decay = s.decay ? c.weight_decay : 0.0f;
        p.step = t;
        p.grad_scale = grad_scale;
        kernels::adamw_update(params + (lo - a), grads + (lo - a), m + (lo - a), v + (lo - a),
                              hi - lo, p);
    }
}

}  // namespace weft::optim
