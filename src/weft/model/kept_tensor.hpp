#pragma once
// An activation a layer keeps for backward, in fp32 or as bf16 bit patterns (--dtype bf16,
// LayerSpan::bf16), and the few ways the families make and read one: rounded into place after
// an fp32 computation, read as a product's input, widened back to fp32 piece by piece for an
// elementwise backward.
#include <algorithm>
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

// out = x · wᵀ + b for x [M, K] kept as bf16 (x16), the output [M, N] only wanted rounded into
// the bf16 `out_kept` at element `at`: natively the product writes it rounded; where bf16
// products are emulated it goes through `scratch` (room for M·N floats) in fp32.
void project_into_kept(KeptTensor& out_kept, int64_t at, const uint16_t* x16, const float* w,
                       const float* b, int64_t M, int64_t K, int64_t N, float* scratch);

// kernels::matmul_backward with its input [M, K] read from where keep_and_project kept it.
void backward_kept(float* dinp, float* dw, float* db, const float* dout, const KeptTensor& kept,
                   int64_t at, const float* w, int64_t M, int64_t K, int64_t N);

// Rounds src [rows, cols] (compact) into a bf16 `kept` at element `at`.
void keep_rounded(KeptTensor& kept, int64_t at, const float* src, int64_t rows, int64_t cols);

// dst[i] = the fp32 value of src[i] (exact), for i < n.
void widen_bf16(float* dst, const uint16_t* src, int64_t n);

// f(x, off, len) over n elements of a bf16 `kept` from element `at`, x the fp32 values of
// elements off .. off + len - 1 widened into `scratch` (room for `room` floats) a piece at a
// time: an elementwise backward that needs its fp32 input, with no fp32 copy of the whole.
template <typename F>
void for_widened(const KeptTensor& kept, int64_t at, int64_t n, float* scratch, int64_t room,
                 F&& f) {
    for (int64_t off = 0; off < n; off += room) {
        const int64_t len = std::min(room, n - off);
        widen_bf16(scratch, kept.b16() + at + off, len);
        f(static_cast<const float*>(scratch), off, len);
    }
}

}  // namespace weft::model
