#include "weft/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {

void OptimConfig::validate() const {
    find_optimizer(optimizer);
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
    WEFT_CHECK(mezo_eps > 0 && std::isfinite(mezo_eps),
               "--mezo-eps must be positive and finite, got {}", mezo_eps);
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

Optimizer::Optimizer(const model::ParamLayout& layout, int64_t begin, int64_t end)
    : layout_(&layout), begin_(begin), end_(end) {
    WEFT_CHECK(begin >= 0 && begin <= end && end <= layout.total,
               "internal: optimizer range [{}, {}) outside the buffer of {}", begin, end,
               layout.total);
    // Decay applies tensor by tensor; alignment padding between tensors counts as no-decay
    // (it is zero and stays zero).
    int64_t cursor = begin;
    for (const auto& t : layout.tensors) {
        int64_t b = std::max(begin, t.offset), e = std::min(end, t.offset + t.numel_stored);
        if (b >= e) continue;
        if (b > cursor) segments_.push_back({cursor - begin, b - begin, nullptr});
        segments_.push_back({b - begin, e - begin, &t});
        cursor = e;
    }
    if (cursor < end) segments_.push_back({cursor - begin, end - begin, nullptr});
}

Optimizer::~Optimizer() = default;

int64_t Optimizer::state_bytes() const {
    int64_t n = 0;
    for (int64_t b : state_bytes_) n += b;
    return n;
}

void Optimizer::allocate() {
    state_.clear();
    for (int64_t b : state_bytes_) state_.emplace_back((b + 3) / 4);
}

void Optimizer::step(float* params, const float* grads, const StepArgs& s) {
    WEFT_CHECK(state_.size() == state_bytes_.size(),
               "internal: stepping an optimizer whose state is not allocated");
    std::vector<std::byte*> states;
    for (int k = 0; k < this->states(); ++k) states.push_back(state(k));
    step_range(params, grads, states.data(), 0, size(), s);
}

std::vector<Optimizer::Segment> Optimizer::segments_in(int64_t a, int64_t b) const {
    std::vector<Segment> out;
    for (const Segment& s : segments_) {
        const int64_t lo = std::max(a, s.begin), hi = std::min(b, s.end);
        if (lo < hi) out.push_back({lo, hi, s.tensor});
    }
    return out;
}

void Optimizer::read_moment(int k, int64_t a, int64_t n, float* out) const {
    std::vector<const std::byte*> own;
    for (int j = 0; j < states(); ++j)
        own.push_back(reinterpret_cast<const std::byte*>(state_buffer(j).data()));
    read_moment(own.data(), 0, k, a, n, out);
}

void Optimizer::write_moment(int k, int64_t a, int64_t n, const float* in) {
    std::vector<std::byte*> own;
    for (int j = 0; j < states(); ++j) own.push_back(state(j));
    write_moment(own.data(), 0, k, a, n, in);
}

void Optimizer::read_moment(const std::byte* const* states, int64_t base, int k, int64_t a,
                            int64_t n, float* out) const {
    WEFT_CHECK(k < moments(), "internal: moment {} of an optimizer with {}", k, moments());
    std::memcpy(out, states[k] + (state_offset(k, a) - state_offset(k, base)),
                size_t(n) * sizeof(float));
}

void Optimizer::write_moment(std::byte* const* states, int64_t base, int k, int64_t a, int64_t n,
                             const float* in) {
    WEFT_CHECK(k < moments(), "internal: moment {} of an optimizer with {}", k, moments());
    std::memcpy(states[k] + (state_offset(k, a) - state_offset(k, base)), in,
                size_t(n) * sizeof(float));
}

}  // namespace weft::optim
