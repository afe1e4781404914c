#include "weft/model/norm_block.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/layernorm.hpp"
#include "weft/kernels/rmsnorm.hpp"

namespace weft::model {

namespace k = weft::kernels;

NormBlock::NormBlock(Kind kind, int64_t width, float eps, TpRegions& tp)
    : kind_(kind), C_(width), eps_(eps), tp_(tp) {}

void NormBlock::forward(float* out, Stats st, const float* x, Tensors p, int64_t rows) {
    float* own = tp_.own_rows(out, rows);
    if (kind_ == Kind::layer_norm)
        k::layernorm_forward(own, st.mean, st.rstd, x, p.w, p.b, rows, C_, eps_);
    else
        k::rmsnorm_forward(own, st.rstd, x, p.w, rows, C_, eps_);
    tp_.gather_rows(out, rows);
}

void NormBlock::begin_backward() {
    slots_ = 0;
    if (!tp_.sp()) return;
    partial_.ensure(scratch_floats(kind_, C_, true));
    partial_.zero();
}

void NormBlock::backward(int slot, float* dx, Tensors g, const float* dout, const float* x,
                         Tensors p, Stats st, int64_t rows) {
    WEFT_CHECK(slot >= 0 && slot < max_slots, "internal: norm slot {} of {}", slot, max_slots);
    if (tp_.sp()) {
        const int n = tensors();
        float* at = partial_.data() + slot * n * C_;
        dst_[slot * n] = g.w;
        if (n == 2) dst_[slot * n + 1] = g.b;
        g = {at, n == 2 ? at + C_ : nullptr};
        slots_ = std::max(slots_, slot + 1);
    }
    if (kind_ == Kind::layer_norm)
        k::layernorm_backward(dx, g.w, g.b, dout, x, p.w, st.mean, st.rstd, rows, C_);
    else
        k::rmsnorm_backward(dx, g.w, dout, x, p.w, st.rstd, rows, C_);
}

void NormBlock::end_backward() {
    if (tp_.sp() && slots_ > 0) tp_.add_replicated_grads(partial_.data(), dst_, slots_ * tensors());
    slots_ = 0;
}

int64_t NormBlock::scratch_floats(Kind kind, int64_t width, bool sequence_parallel) {
    const int n = kind == Kind::layer_norm ? 2 : 1;
    return sequence_parallel ? max_slots * n * width : 0;
}

}  // namespace weft::model
