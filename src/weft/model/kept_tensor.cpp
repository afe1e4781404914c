#include "weft/model/kept_tensor.hpp"

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/model/weight_grads.hpp"

namespace weft::model {

namespace k = weft::kernels;

void keep_and_project(float* out, const float* x, KeptTensor& kept, int64_t at, const float* w,
                      const float* b, int64_t M, int64_t K, int64_t N) {
    if (!kept.bf16()) return k::matmul_forward(out, x, w, b, M, K, N);
    keep_rounded(kept, at, x, M, K);
    k::matmul_forward_bf16_input(out, kept.b16() + at, w, b, M, K, N);
}

void keep_and_project_kept(KeptTensor& out_kept, int64_t out_at, const float* x, KeptTensor& kept,
                           int64_t at, const float* w, const float* b, int64_t M, int64_t K,
                           int64_t N, float* scratch) {
    keep_rounded(kept, at, x, M, K);
    const uint16_t* x16 = kept.b16() + at;
    if (k::bf16_products_native())
        return k::matmul_forward_bf16_in_out(out_kept.b16() + out_at, x16, w, b, M, K, N);
    k::matmul_forward_bf16_input(scratch, x16, w, b, M, K, N);
    keep_rounded(out_kept, out_at, scratch, M, N);
}

void backward_kept(float* dinp, float* dw, float* db, const float* dout, const KeptTensor& kept,
                   int64_t at, const float* w, int64_t M, int64_t K, int64_t N) {
    if (WeightGradQueue* q = DeferWeightGrads::current()) {
        q->defer(dw, db, dout, kept, at, M, K, N);
        dw = db = nullptr;
    }
    if (!kept.bf16())
        return k::matmul_backward(dinp, dw, db, dout, kept.f32() + at, w, M, K, N, false);
    k::matmul_backward_bf16_input(dinp, dw, db, dout, kept.b16() + at, w, M, K, N, false);
}

void backward_kept_rounded(uint16_t* dinp16, float* scratch, float* dw, float* db,
                           const float* dout, const KeptTensor& kept, int64_t at, const float* w,
                           int64_t M, int64_t K, int64_t N) {
    WEFT_CHECK(kept.bf16(), "internal: backward_kept_rounded on an fp32 kept input");
    if (WeightGradQueue* q = DeferWeightGrads::current()) {
        q->defer(dw, db, dout, kept, at, M, K, N);
        dw = db = nullptr;
    }
    if (k::bf16_products_native())
        return k::matmul_backward_bf16_in_out(dinp16, dw, db, dout, kept.b16() + at, w, M, K, N);
    k::matmul_backward_bf16_input(scratch, dw, db, dout, kept.b16() + at, w, M, K, N, false);
    k::convert_fp32_to_bf16(dinp16, scratch, M, K, K);
}

void backward_kept_bf16_dout(float* dinp, float* dw, const uint16_t* dout, const KeptTensor& kept,
                             int64_t at, const float* w, int64_t M, int64_t K, int64_t N) {
    WEFT_CHECK(kept.bf16(), "internal: backward_kept_bf16_dout on an fp32 kept input");
    if (WeightGradQueue* q = DeferWeightGrads::current()) {
        q->defer_bf16_dout(dw, dout, kept, at, M, K, N);
        dw = nullptr;
    }
    k::matmul_backward_bf16_dout(dinp, dw, dout, kept.b16() + at, w, M, K, N, false);
}

void keep_rounded(KeptTensor& kept, int64_t at, const float* src, int64_t rows, int64_t cols) {
    WEFT_PROFILE("bf16_keep");
    k::convert_fp32_to_bf16(kept.b16() + at, src, rows, cols, cols);
}

void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
    WEFT_PROFILE("bf16_widen");
    k::convert_bf16_to_fp32(dst, src, n);
}

}  // namespace weft::model
