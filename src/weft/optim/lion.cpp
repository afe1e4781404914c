// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): one fp32 state, half
// of Adam's; every element moves by exactly lr (the sign of an interpolation of momentum and
// gradient) plus decoupled weight decay:
//   c = b1 m + (1 - b1) g,  w -= lr (sign(c) + wd w),  m = b2 m + (1 - b2) g.
// Its updates are larger than Adam's, so it wants a smaller lr and a larger wd (docs/memory.md).
#include <algorithm>

#include "weft/kernels/profile.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {

namespace {

class Lion : public Optimizer {
  public:
    Lion(const model::ParamLayout& layout, int64_t begin, int64_t end, bool allocate)
        : Optimizer(layout, begin, end) {
        set_state_bytes({4 * size()});
        if (allocate) this->allocate();
    }

    int moments() const override { return 1; }

    void step_range(float* params, const float* grads, std::byte* const* states, int64_t a,
                    int64_t b, const StepArgs& s) override {
        WEFT_PROFILE("lion");
        float* m = reinterpret_cast<float*>(states[0]);
        const float b1 = s.c.beta1, b2 = s.c.beta2, lr = s.lr, gs = s.grad_scale;
        for (const Segment& seg : segments_in(a, b)) {
            const float wd = seg.decay() ? s.c.weight_decay : 0.0f;
            float* w = params + seg.begin;
            const float* g = grads + seg.begin;
            float* ms = m + (seg.begin - a);
            for_each_element(seg.end - seg.begin, [&](int64_t i) {
                const float gi = g[i] * gs;
                const float u = b1 * ms[i] + (1.0f - b1) * gi;
                const float sign = float(u > 0.0f) - float(u < 0.0f);
                w[i] -= lr * (sign + wd * w[i]);
                ms[i] = b2 * ms[i] + (1.0f - b2) * gi;
            });
        }
    }
};

}  // namespace

OptimizerSpec lion_spec() {
    return {"lion", "Lion: sign of interpolated momentum, one fp32 state",
            4.0,    true,
            0.9f,   0.99f,
            {4},    factory<Lion>()};
}

}  // namespace weft::optim
