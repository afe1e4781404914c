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

// Σ x², accumulated in double (gradient norms must not depend on the thread count's rounding
// more than necessary).
double sum_squares(const float* x, int64_t n);

}  // namespace weft::kernels
