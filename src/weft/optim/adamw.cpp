// AdamW: the reference optimizer, its update the kernel's (kernels/adamw.hpp), tensor by tensor.
#include "weft/kernels/adamw.hpp"

#include "weft/optim/optimizer.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {

AdamW::AdamW(const model::ParamLayout& layout, int64_t begin, int64_t end, bool allocate)
    : Optimizer(layout, begin, end) {
    set_state_bytes({4 * size(), 4 * size()});
    if (allocate) this->allocate();
}

void AdamW::step_range(float* params, const float* grads, std::byte* const* states, int64_t a,
                       int64_t b, const StepArgs& s) {
    // The moments' pointers are at element a; params and grads at element 0.
    float* m = reinterpret_cast<float*>(states[0]);
    float* v = reinterpret_cast<float*>(states[1]);
    for (const Segment& seg : segments_in(a, b)) {
        kernels::AdamWParams p;
        p.lr = s.lr;
        p.beta1 = s.c.beta1;
        p.beta2 = s.c.beta2;
        p.eps = s.c.eps;
        p.weight_decay = seg.decay() ? s.c.weight_decay : 0.0f;
        p.step = s.t;
        p.grad_scale = s.grad_scale;
        kernels::adamw_update(params + seg.begin, grads + seg.begin, m + (seg.begin - a),
                              v + (seg.begin - a), seg.end - seg.begin, p);
    }
}

OptimizerSpec adamw_spec() {
    return {"adamw", "Adam with decoupled weight decay, two fp32 moments",
            8.0,     true,
            0.9f,    0.95f,
            {4, 4},  factory<AdamW>()};
}

}  // namespace weft::optim
