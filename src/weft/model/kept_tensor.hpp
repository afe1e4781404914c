#pragma once
// An activation a layer keeps for backward, in fp32 or as bf16 bit patterns (--dtype bf16,
// LayerSpan::bf16), and the few ways the families make and read one: rounded into place after
// an fp32 computation, read as a product's input, written rounded by a product, widened back to
// fp32.
#include <cstdint>

#include "weft/core/buffer.hpp"

namespace weft::model {

// A Buffer of size() floats of storage: n fp32 elements, or n bf16 elements in half the floats.
// It stays a Buffer so that whoever only counts storage (memory estimates, tests) needs no case.
class KeptTensor : public Buffer {
  public:
    KeptTensor() = default;
    KeptTensor(int64_t n, bool bf16) : Buffer(floats(n, bf16)), bf16_(bf16) {}
    // Floats of storage n elements take.
    static int64_t floats(int64_t n, bool bf16) { return bf16 ? (n + 1) / 2 : n; }

    bool bf16() const { return bf16_; }
    float* f32() { return data(); }
    const float* f32() const { return data(); }
    // Storage from aligned_alloc has no declared type, so reading it as uint16_t is sound.
    uint16_t* b16() { return reinterpret_cast<uint16_t*>(data()); }
    const uint16_t* b16() const { return reinterpret_cast<const uint16_t*>(data()); }

  private:
    bool bf16_ = false;
};

// out = x · wᵀ + b for x [M, K] in fp32, kept for backward at element `at` of `kept`: x already
// is that place when it is fp32; bf16 rounds it there first and the product reads the rounded
// copy (the bits the fp32 product under bf16 precision would round it to).
void keep_and_project(float* out, const float* x, KeptTensor& kept, int64_t at, const float* w,
                      const float* b, int64_t M, int64_t K, int64_t N);

// keep_and_project into a bf16 `kept` (at element `at`) whose output [M, N] is only wanted kept
// too, rounded into the bf16 `out_kept` at element `out_at`: natively the product writes it
// rounded; where bf16 products are emulated it goes through `scratch` (room for M·N floats) in
// fp32.
void keep_and_project_kept(KeptTensor& out_kept, int64_t out_at, const float* x, KeptTensor& kept,
                           int64_t at, const float* w, const float* b, int64_t M, int64_t K,
                           int64_t N, float* scratch);

// kernels::matmul_backward with its input [M, K] read from where keep_and_project kept it. These
// backwards compute only the input's gradient, and queue the weights' (and bias's), while a
// DeferWeightGrads scope lives (weight_grads.hpp: the zero-bubble schedules' W).
void backward_kept(float* dinp, float* dw, float* db, const float* dout, const KeptTensor& kept,
                   int64_t at, const float* w, int64_t M, int64_t K, int64_t N);

// backward_kept for a bf16 `kept` whose input gradient is only wanted rounded to bf16, into
// dinp16: natively the product writes it rounded; where bf16 products are emulated it goes
// through `scratch` (room for M·K floats) in fp32.
void backward_kept_rounded(uint16_t* dinp16, float* scratch, float* dw, float* db,
                           const float* dout, const KeptTensor& kept, int64_t at, const float* w,
                           int64_t M, int64_t K, int64_t N);

// backward_kept for a bf16 `kept` whose product's output gradient comes rounded to bf16
// (kernels::matmul_backward_bf16_dout; the bias gradient is the caller's).
void backward_kept_bf16_dout(float* dinp, float* dw, const uint16_t* dout, const KeptTensor& kept,
                             int64_t at, const float* w, int64_t M, int64_t K, int64_t N);

// Rounds src [rows, cols] (compact) into a bf16 `kept` at element `at`.
void keep_rounded(KeptTensor& kept, int64_t at, const float* src, int64_t rows, int64_t cols);

// dst[i] = the fp32 value of src[i] (exact), for i < n.
void widen_bf16(float* dst, const uint16_t* src, int64_t n);

}  // namespace weft::model
