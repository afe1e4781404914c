#pragma once
// The output head fused with softmax cross-entropy, in chunks of rows, so that the N×V logits
// never all exist at once (only a chunk×V block per call). The head is tied to the token
// embedding wte[V', C]; only its first V rows (the real vocabulary) are read, so padding rows
// never touch a loss, a gradient or a sample.
#include <cstdint>

#include "weft/kernels/distill_rows.hpp"

namespace weft::kernels {

// For each row n: logits_v = x[n,:]·wte[v,:] (v < V), loss[n] = logsumexp(logits) - logits[t_n].
// Rows with target < 0 are ignored (loss 0, no gradient).
// Gradients of L = scale * Σ_n loss[n], when the pointers are not null:
//   dx[n,:]    = scale * Σ_v (p_nv - [v = t_n]) wte[v,:]    (overwritten)
//   dwte[v,:] += scale * Σ_n (p_nv - [v = t_n]) x[n,:]     (accumulated; rows ≥ V untouched)
// With `soft` (its logits [N, V]), loss[n] and the logits' gradient are distill_rows' mix of
// that cross-entropy and the KL divergence from the teacher's (fp32 products only).
void classifier_forward_backward(float* loss, float* dx, float* dwte, const float* x,
                                 const float* wte, const int32_t* targets, int64_t N, int64_t C,
                                 int64_t V, float scale, const SoftTargets* soft = nullptr);

// logits[N, V] = x · wte[:V]ᵀ (sampling, tests).
void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C,
                       int64_t V);

// Rows of x the kernel takes at a time (the vocabulary-parallel phases use the same chunks).
int64_t classifier_chunk_rows(int64_t N);

// Floats of scratch the fused kernel holds at once (for the memory estimate).
int64_t classifier_scratch_floats(int64_t N, int64_t V);

}  // namespace weft::kernels
