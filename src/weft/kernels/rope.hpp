#pragma once
// Rotary position embeddings in Hugging Face's rotate_half layout (what LlamaForCausalLM and its
// checkpoints use): a head vector x of HS values is two halves, and pair i (x[i], x[i + HS/2])
// is rotated by pos · inv_freq[i]:
//   out[i] = x[i] cos - x[i + half] sin,  out[i + half] = x[i + half] cos + x[i] sin.
#include <cstdint>
#include <vector>

namespace weft::kernels {

// Hugging Face's rope_scaling: none, "linear" (inv_freq / factor) or "llama3" (Llama 3.1's
// frequency-dependent factor: long wavelengths divided by factor, short ones kept, a smooth
// blend between).
struct RopeScaling {
    enum class Kind { none, linear, llama3 } kind = Kind::none;
    double factor = 1.0;
    double low_freq_factor = 1.0, high_freq_factor = 4.0;
    int64_t original_max_position = 8192;
};

// inv_freq[i] = theta^(-2i / HS) for i < HS/2, scaled as transformers' _compute_linear_scaling
// and _compute_llama3_parameters do; in double.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s);

// cos and sin of pos · inv_freq[i] for pos < positions: [positions, half] each, the angles taken
// in double and rounded once.
struct RopeTable {
    int64_t positions = 0, half = 0;
    std::vector<float> cos, sin;
};
RopeTable rope_table(int64_t head_dim, int64_t positions, double theta, const RopeScaling& s);

// In place: for b < B, t < T and h < nheads, the HS values at x + (b*T + t)*ld + h*HS are rotated
// to position pos0 + t (which must be inside the table).
void rope_forward(float* x, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld,
                  int64_t pos0, const RopeTable& table);
// The transpose (rotation by minus the angle), in place on a gradient laid out the same way.
void rope_backward(float* dx, int64_t B, int64_t T, int64_t nheads, int64_t HS, int64_t ld,
                   int64_t pos0, const RopeTable& table);

}  // namespace weft::kernels
