#include "weft/kernels/attention/merge.hpp"

#include <algorithm>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

void attention_merge(float* out, float* lse, const float* part, const float* part_lse,
                     const MergeShape& s) {
    WEFT_PROFILE("attention_merge");
    WEFT_CHECK(s.B >= 0 && s.T >= 0 && s.NH >= 0,
               "attention_merge: B={}, T={}, NH={} must not be negative", s.B, s.T, s.NH);
    WEFT_CHECK(s.HS >= 1, "attention_merge: head size HS={} must be at least 1", s.HS);
    WEFT_CHECK(s.ldo >= s.NH * s.HS && s.ldp >= s.NH * s.HS,
               "attention_merge: strides ldo={}, ldp={} must be at least NH*HS={} (NH={}, HS={})",
               s.ldo, s.ldp, s.NH * s.HS, s.NH, s.HS);
    const int64_t rows = s.B * s.T, HS = s.HS;
    // O(rows·NH·HS), memory-bound: threads only where there is enough to stream.
#pragma omp parallel for schedule(static) if (rows * s.NH * HS > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / s.T, t = r % s.T;
        for (int64_t h = 0; h < s.NH; ++h) {
            float& la = lse[(b * s.NH + h) * s.T + t];
            const float lb = part_lse[(b * s.NH + h) * s.T + t];
            float* oa = out + r * s.ldo + h * HS;
            const float* ob = part + r * s.ldp + h * HS;
            if (lb == -INFINITY) {
                // Nothing to add; a running result not yet started becomes an empty one.
                if (la == -INFINITY) std::fill(oa, oa + HS, 0.0f);
                continue;
            }
            if (la == -INFINITY) {  // the part alone, bit for bit (its weight is exp(0) = 1)
                std::copy(ob, ob + HS, oa);
                la = lb;
                continue;
            }
            const float mx = std::max(la, lb), mn = std::min(la, lb);
            const float l = mx + std::log1p(std::exp(mn - mx));
            const float wa = std::exp(la - l), wb = std::exp(lb - l);
            for (int64_t d = 0; d < HS; ++d) oa[d] = oa[d] * wa + ob[d] * wb;
            la = l;
        }
    }
}

}  // namespace weft::kernels
