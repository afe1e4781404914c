#pragma once
// MeZO (Malladi et al. 2023, "Fine-Tuning Language Models with Just Forward Passes"): SPSA with
// the perturbation regenerated from a seed. A step draws z ~ N(0, 1) per parameter, measures the
// loss at w + eps z and at w - eps z, restores w, and moves along z by the projected gradient
// (L+ - L-) / (2 eps): w -= lr (g z + wd w). No gradient and no state: the memory of inference.
//
// z of an element is Philox's normal for (seed, step) at the element's place in its unit (unit
// index, offset from the unit's start), which no ZeRO layout moves: every rank, whatever slice
// of the buffer it holds, draws the same z for the same parameter as a single process.
#include "weft/optim/optimizer.hpp"

namespace weft::optim {

class ZerothOrder : public Optimizer {
  public:
    using Optimizer::Optimizer;
    // params (at element begin()) += scale z of step `t` of the run seeded `seed`, over the
    // whole range or elements [a, b) of it (what an offloaded master streams group by group:
    // element-wise, so the cut changes no bit).
    void perturb(float* params, float scale, uint64_t seed, int64_t t) const {
        perturb_range(params, scale, seed, t, 0, size());
    }
    virtual void perturb_range(float* params, float scale, uint64_t seed, int64_t t, int64_t a,
                               int64_t b) const = 0;
};

}  // namespace weft::optim
