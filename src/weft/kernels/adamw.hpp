#pragma once
// AdamW (Loshchilov & Hutter) with bias correction, decoupled weight decay.
#include <cstdint>

namespace weft::kernels {

struct AdamWParams {
    float lr;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;  // applied as param -= lr * wd * param
    int64_t step = 1;           // 1-based, for bias correction
    float grad_scale = 1.0f;    // multiplies every gradient first (global-norm clipping)
};

// Updates param, m, v in place from grad, for n elements.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p);

}  // namespace weft::kernels
