#pragma once
// Small element-wise and reduction kernels: residual add, embeddings, squared norms.
#include <cstdint>

namespace weft::kernels {

// out = a + b (out may alias a or b).
void add_forward(float* out, const float* a, const float* b, int64_t n);
// out += a
void add_inplace(float* out, const float* a, int64_t n);

// out[b,t,:] = wte[tokens[b,t],:] + wpe[pos0 + t,:]. pos0 shifts positions (KV-cache sampling,
// context parallel).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t pos0 = 0);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[pos0 + t,:] += Σ_b dout[b,t,:]. Either may be null.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, int64_t pos0 = 0);

// Vocabulary-parallel embedding: this rank holds the rows [v0, v0 + Vs) of wte (wte_shard[0] is
// row v0). out[b,t,:] = wte_shard[tokens[b,t] - v0,:] for the tokens in that range and 0 for the
// others, so that the ranks' outputs sum to the whole lookup; plus wpe[pos0 + t,:] when wpe is
// given (one rank passes it, so that the sum adds it once).
void embedding_forward_shard(float* out, const int32_t* tokens, const float* wte_shard,
                             const float* wpe, int64_t B, int64_t T, int64_t C, int64_t v0,
                             int64_t Vs, int64_t pos0 = 0);
// dwte_shard[tokens[b,t] - v0,:] += dout[b,t,:] for the tokens in [v0, v0 + Vs).
void embedding_backward_shard(float* dwte_shard, const float* dout, const int32_t* tokens,
                              int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vs);

// out[n,:] = (out[n,:] + bias) + resid[n,:] for n < N: a row-parallel projection's bias, added
// once after its partial products were summed over the ranks, and the residual connection.
void add_bias_residual(float* out, const float* bias, const float* resid, int64_t N, int64_t C);

// Σ x², accumulated in double (gradient norms must not depend on the thread count's rounding
// more than necessary): the sums of blocks of kSumSquaresBlock from x, added in block order, so
// that a caller summing the same blocks one call each gets the same bits.
inline constexpr int64_t kSumSquaresBlock = 16384;
double sum_squares(const float* x, int64_t n);

}  // namespace weft::kernels
