#pragma once
// Merging partial attention results: attention over a set of keys split into blocks is the
// attention of each block, (out_i, lse_i), combined by their log-sum-exps. Ring attention computes
// one block per step (docs/context_parallel.md) and folds it into a running (out, lse):
//   lse = max + log(exp(lse_a - max) + exp(lse_b - max)),  max = max(lse_a, lse_b)
//   out = out_a · exp(lse_a - lse) + out_b · exp(lse_b - lse)
// in fp32; every exponent is <= 0, so nothing overflows. A side with lse = -inf (a query that saw
// no key of that block, or a running result not yet started) takes no part and its output is not
// read, so a running result may start as lse = -inf with any output; both sides -inf give
// lse = -inf and an output of zeros, never NaN.
//
// Layout as attention_forward writes it (attention.hpp): for batch b, position t and head h,
//   out row  = out + (b*T + t)*ldo + h*HS   (part: ldp)
//   lse      = lse[(b*NH + h)*T + t]
#include <cstdint>

namespace weft::kernels {

struct MergeShape {
    int64_t B, T, NH, HS;
    int64_t ldo, ldp;  // row strides of the running output and of the part, in elements
};

// Folds (part, part_lse) into (out, lse) in place.
void attention_merge(float* out, float* lse, const float* part, const float* part_lse,
                     const MergeShape& s);

}  // namespace weft::kernels
