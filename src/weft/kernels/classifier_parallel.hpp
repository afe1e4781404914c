#pragma once
// The vocabulary-parallel output head with softmax cross-entropy (Megatron-LM's): tensor-parallel
// rank r holds a slice of the tied embedding wte, the rows [v0, v0 + Vr) of the real vocabulary
// (the padding rows of its shard are never read), and the logits exist only as each rank's
// columns of one chunk of rows. This is classifier_forward_backward cut into phases; between them
// the caller combines the ranks' per-row statistics (the kernels know no communication):
//
//   for each chunk of classifier_chunk_rows(N) rows:
//     classifier_shard_logits    row_max    -> all-reduce max over the ranks
//     classifier_shard_sums      sums[2r]   -> all-reduce sum
//     classifier_shard_finish    loss; dx partial, dwte shard
//   dx summed over the ranks (all-reduce; reduce-scatter under sequence parallelism)
//
// One rank holding the whole vocabulary computes what the fused kernel does, with the same
// exponential, so the losses agree to rounding.
#include <cstdint>

namespace weft::kernels {

// logits[N, Vr] = x[N, C] · wte[:Vr]ᵀ; row_max[n] = max of row n (-inf when Vr = 0).
void classifier_shard_logits(float* logits, float* row_max, const float* x, const float* wte,
                             int64_t N, int64_t C, int64_t Vr);

// With row_max now the maximum over the whole vocabulary:
//   sums[n]     = Σ_v exp(logits[n,v] - row_max[n]) over this shard's columns,
//   sums[N + n] = the target's logit if this shard holds it (v0 <= t < v0 + Vr), else 0,
// so that summing sums over the ranks gives each row's softmax denominator and target logit.
// With keep_exp, logits become those exponentials (for classifier_shard_finish). Rows with
// target < 0 are ignored: sums 0, and their logits zeroed.
void classifier_shard_sums(float* sums, float* logits, const float* row_max, const int32_t* targets,
                           int64_t N, int64_t Vr, int64_t v0, bool keep_exp);

// With sums summed over the ranks: loss[n] = log(sum) + max - target logit (0 for ignored rows;
// loss may be null). When dx or dwte is given (the logits then hold keep_exp's exponentials), the
// logits become dlogits = scale * (softmax - onehot) in place, and
//   dx[n,:]    = Σ_{v in shard} dlogits[n,v] wte[v,:]    (overwritten; the ranks' dx sum to the
//                                                         fused kernel's)
//   dwte[v,:] += Σ_n dlogits[n,v] x[n,:]                 (this shard's rows)
void classifier_shard_finish(float* loss, float* dx, float* dwte, float* logits,
                             const float* row_max, const float* sums, const float* x,
                             const float* wte, const int32_t* targets, int64_t N, int64_t C,
                             int64_t Vr, int64_t v0, float scale);

// Floats of the caller's buffers for N rows over a shard of Vr columns: one chunk of logits, its
// row maxima and sums (for the memory estimate).
int64_t classifier_shard_scratch_floats(int64_t N, int64_t Vr);

}  // namespace weft::kernels
