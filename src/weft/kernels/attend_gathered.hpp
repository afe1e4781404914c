#pragma once
// One query's attention over cached positions whose keys and values lie wherever a paged KV
// cache put them (serving's attend_rows gathers them through a block table): the pointers come
// in position order. Batch invariant by construction: the result is one fixed sequence of
// operations over the query and those keys and values, the same on the AVX-512 and the portable
// path, whatever else the caller computes.
#include <cstdint>

namespace weft::kernels {

// out[HS] = Σ_j softmax_j(scale · q·keys[j]) values[j] over j < n (n >= 1). The order: each
// score a 16-lane dot over HS (lane l takes d ≡ l mod 16, one fused multiply-add each, folded
// as matmul_rows folds), times scale; their maximum; exp(score - max) as exp_nonpositive's
// vector path; the sum of those in 16 lanes over j, folded; out[d] the fused multiply-adds of
// p_j · values[j][d] in increasing j, then times 1 / sum. `scores` holds n floats of scratch.
void attend_gathered(float* out, const float* q, const float* const* keys,
                     const float* const* values, int64_t n, int64_t HS, float scale, float* scores);
// Keys and values in bf16 (a bf16 KV cache), widened exactly: the same order on their values.
void attend_gathered(float* out, const float* q, const uint16_t* const* keys,
                     const uint16_t* const* values, int64_t n, int64_t HS, float scale,
                     float* scores);

// The G query heads that share one kv head (grouped-query attention) in one pass over its keys
// and values: q and out hold G heads of HS, one after the other, and head h's output is the bits
// of attend_gathered on q + h·HS (each key and value is read once for up to four heads instead
// of once per head). `scores` holds G·n floats of scratch.
void attend_gathered_group(float* out, const float* q, int64_t G, const float* const* keys,
                           const float* const* values, int64_t n, int64_t HS, float scale,
                           float* scores);
void attend_gathered_group(float* out, const float* q, int64_t G, const uint16_t* const* keys,
                           const uint16_t* const* values, int64_t n, int64_t HS, float scale,
                           float* scores);

}  // namespace weft::kernels
