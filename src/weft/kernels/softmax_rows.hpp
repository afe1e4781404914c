#pragma once
// The row loops of a softmax over logits, shared by the fused classifier (classifier.cpp) and its
// vocabulary-parallel phases (classifier_parallel.cpp): the same accumulation order in both, so
// one shard reproduces the fused kernel bit for bit.
#include <cstdint>

namespace weft::kernels::detail {

// One row of grad_bf16_transposed: its logits (null: a row with no gradient), their maximum,
// the factor scale / Σexp, and its target.
struct GradRow {
    const float* logits = nullptr;
    float max = 0.0f, k = 0.0f;
    int32_t target = -1;
};

struct SoftmaxRowOps {
    // Largest element of row[0, V).
    float (*max)(const float* row, int64_t V);
    // Sum of exp(row[v] - max); with `keep` each element is replaced by its exponential.
    float (*exp_sum)(float* row, int64_t V, float max, bool keep);
    // row[v] *= k.
    void (*scale)(float* row, int64_t V, float k);
    // The softmax gradient of a block of n <= kTransposedRows rows of logits, rounded to bf16
    // (nearest even) and written transposed: out[v·ld + i] = exp(x - max)·k for x = row i's
    // logit v, less `scale` at its target, for v < V and i < n (zeros for a row without logits).
    // The same bits as exp_sum keeping the exponentials, scale, the step at the target and
    // convert_fp32_to_bf16, without writing the rows: the classifier stores its logits' gradient
    // so, [V, rows], for the products that read it.
    void (*grad_bf16_transposed)(uint16_t* out, int64_t ld, const GradRow* rows, int64_t n,
                                 float scale, int64_t V);
};

inline constexpr int64_t kTransposedRows = 32;

// The portable or the AVX-512 loops, as the kernel ISA now in force says.
SoftmaxRowOps softmax_row_ops();

}  // namespace weft::kernels::detail

namespace weft::kernels {

// log softmax(row)[t] over row[0, V), in float through the loops above (vectorised, one fixed
// order per row): serving's log-probability of each token it emits, per request and step.
float log_softmax_at(const float* row, int64_t V, int64_t t);

// A row's log-softmax terms, computed once: at(row[t]) is log_softmax_at(row, V, t), bit for bit,
// for every t (its maximum and its log-sum are the same floats).
struct LogSoftmaxRow {
    float max = 0, log_sum = 0;
    float at(float x) const { return x - max - log_sum; }
};
LogSoftmaxRow log_softmax_terms(const float* row, int64_t V);

// The n (<= V) largest elements' indices of row[0, V), largest first and, among equal ones, the
// lower index first: the top log-probabilities a request asks for (`top_logprobs`). One pass
// that compares each element with the n-th kept so far.
void top_indices(const float* row, int64_t V, int64_t n, int32_t* out);

// The first index of row[0, V)'s largest element (V >= 1), std::max_element's answer for rows
// without NaN, in two vector passes (the maximum, then its first place) instead of a scalar
// compare per element: greedy decoding's choice, per request and token.
int64_t argmax(const float* row, int64_t V);

}  // namespace weft::kernels
