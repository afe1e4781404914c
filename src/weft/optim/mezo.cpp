#include "weft/optim/mezo.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/core/philox.hpp"
#include "weft/kernels/normals.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {

namespace {

class Mezo : public ZerothOrder {
  public:
    Mezo(const model::ParamLayout& layout, int64_t begin, int64_t end, bool /*allocate: none*/)
        : ZerothOrder(layout, begin, end) {
        set_state_bytes({});
    }

    int moments() const override { return 0; }

    void perturb_range(float* params, float scale, uint64_t seed, int64_t t, int64_t a,
                       int64_t b) const override {
        WEFT_PROFILE("mezo_perturb");
        walk(
            seed, t, a, b, [&](float* w, float z, bool) { *w = std::fma(scale, z, *w); }, params);
    }

    void step_range(float* params, const float*, std::byte* const*, int64_t a, int64_t b,
                    const StepArgs& s) override {
        WEFT_PROFILE("mezo");
        const float g = float(s.projected_grad), lr = s.lr, wd = s.c.weight_decay;
        walk(
            s.c.seed, s.t, a, b,
            [&](float* w, float z, bool decay) {
                *w = std::fma(-lr, decay ? std::fma(g, z, wd * *w) : g * z, *w);
            },
            params);
    }

  private:
    // f(&w, z, decay) for every tensor element of [a, b), z drawn a chunk at a time (the
    // batched normals). The updates name their fused multiply-adds: the loop vectorises, and an
    // element's bits must not depend on whether it falls in the vector body or the scalar tail
    // of its range (a ZeRO shard's). Padding is left alone, zero: the
    // alignment between tensors and the vocabulary's padding rows, which no gradient reaches
    // and no checkpoint holds (a resume reads them as zero, so a z drawn there would part a
    // resumed run from the uninterrupted one).
    template <class F>
    void walk(uint64_t seed, int64_t t, int64_t a, int64_t b, F f, float* params) const {
        const Philox rng = philox_for(seed, fmt::format("mezo z of step {}", t));
        for (Segment seg : segments_in(a, b)) {
            if (!seg.tensor) continue;
            seg.end = std::min(seg.end, seg.tensor->offset + held_numel(*seg.tensor) - begin());
            if (seg.end <= seg.begin) continue;
            const int unit = seg.tensor->unit;
            // The element's place in its unit, the same under every ZeRO layout.
            const uint64_t key =
                (uint64_t(unit) << 40) +
                uint64_t(begin() + seg.begin - layout_->units[size_t(unit)].offset);
            const bool decay = seg.decay();
            float* w = params + seg.begin;
            for_each_chunk(seg.end - seg.begin, [&](int64_t lo, int64_t hi) {
                float z[kChunk];
                kernels::philox_normals(rng, key + uint64_t(lo), hi - lo, z);
                for (int64_t i = lo; i < hi; ++i) f(w + i, z[i - lo], decay);
            });
        }
    }

    // The elements of p's stored shard before its padding rows: those beyond the real
    // vocabulary, a tail of the shard of fewer rows than the vocabulary is padded by.
    int64_t held_numel(const model::ParamSpec& p) const {
        int64_t rows = p.rows_stored;
        while (rows > 0 && model::logical_index(p, layout_->tp_rank, layout_->tp,
                                                (rows - 1) * p.cols_stored) < 0)
            --rows;
        return rows * p.cols_stored;
    }
};

}  // namespace

OptimizerSpec mezo_spec() {
    return {"mezo", "MeZO: zeroth-order SPSA, two forward passes a step, no gradients or state",
            0.0,    false,
            0.9f,   0.95f,
            {},     factory<Mezo>()};
}

}  // namespace weft::optim
