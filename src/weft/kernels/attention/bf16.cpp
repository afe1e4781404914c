// bf16 attention (attention.hpp): on AVX512-BF16 dot products where the CPU has them and the
// head size is even (avx512_bf16.cpp), else as the fp32 kernel on widened inputs.
// Widening is exact and the fp32 kernel already accumulates, takes the softmax and keeps the lse
// in fp32, so that path is the portable one for every CPU: without AVX512-BF16 a bf16 dot
// product would be emulated by the same widening anyway.
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/paths.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include "weft/kernels/attention/bf16_tiles.hpp"
#endif

namespace weft::kernels {

namespace {

// The fp32 copies of one sequence, kept between calls (per thread) as the products' are.
struct Widened {
    std::vector<float> q, k, v, out, dout, dq, dk, dv;
};
thread_local Widened t_wide;

// rows x cols of bf16 at leading dimension ld into a compact fp32 block.
void widen(std::vector<float>& dst, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld) {
    dst.resize(size_t(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[size_t(r * cols + c)] = bf16_to_fp32(src[r * ld + c]);
}

// The shape of one compact sequence of s (the entries check s first, once, for either path).
AttentionShape one_sequence(const AttentionShape& s) {
    AttentionShape one = s;
    one.B = 1;
    one.ldq = one.ldo = s.NH * s.HS;
    one.ldkv = detail::kv_heads(s) * s.HS;
    return one;
}

// Sequence b of q, k and v (shape s), widened into w's buffers in the compact shape `one`.
void widen_qkv(Widened& w, const uint16_t* q, const uint16_t* k, const uint16_t* v,
               const AttentionShape& s, const AttentionShape& one, int64_t b) {
    const int64_t C = one.ldq, CKV = one.ldkv;
    widen(w.q, q + b * s.Tq * s.ldq, s.Tq, C, s.ldq);
    widen(w.k, k + b * s.Tk * s.ldkv, s.Tk, CKV, s.ldkv);
    widen(w.v, v + b * s.Tk * s.ldkv, s.Tk, CKV, s.ldkv);
}

}  // namespace

bool attention_bf16_native(int64_t HS) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    return kernel_isa() == Isa::avx512 && HS % 2 == 0;
#else
    (void)HS;
    return false;
#endif
}

void attention_forward_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const AttentionShape& s) {
    detail::check_shape(s, "attention_forward_bf16");
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (attention_bf16_native(s.HS)) {
        WEFT_PROFILE("attention_fwd");
        if (s.B > 0 && s.NH > 0 && s.Tq > 0)
            detail::attention_forward_bf16_avx512(out, lse, q, k, v, s);
        return;
    }
#endif
    const AttentionShape one = one_sequence(s);
    const int64_t C = one.ldq;
    Widened& w = t_wide;
    for (int64_t b = 0; b < s.B; ++b) {
        widen_qkv(w, q, k, v, s, one, b);
        w.out.resize(size_t(s.Tq * C));
        attention_forward(w.out.data(), lse + b * s.NH * s.Tq, w.q.data(), w.k.data(), w.v.data(),
                          one);
        // Row by row: the padding past NH*HS of a strided out is not ours to write.
        for (int64_t r = 0; r < s.Tq; ++r)
            convert_fp32_to_bf16(out + (b * s.Tq + r) * s.ldo, w.out.data() + r * C, 1, C, C);
    }
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* out, const float* lse, const AttentionShape& s) {
    detail::check_shape(s, "attention_backward_bf16");
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (attention_bf16_native(s.HS)) {
        WEFT_PROFILE("attention_bwd");
        if (s.B > 0 && s.NH > 0 && s.Tq > 0)
            detail::attention_backward_bf16_avx512(dq, dk, dv, dout, q, k, v, out, lse, s);
        return;
    }
#endif
    const AttentionShape one = one_sequence(s);
    const int64_t C = one.ldq, CKV = one.ldkv;
    Widened& w = t_wide;
    for (int64_t b = 0; b < s.B; ++b) {
        widen_qkv(w, q, k, v, s, one, b);
        widen(w.out, out + b * s.Tq * s.ldo, s.Tq, C, s.ldo);
        widen(w.dout, dout + b * s.Tq * s.ldo, s.Tq, C, s.ldo);
        w.dq.assign(size_t(s.Tq * C), 0.0f);
        w.dk.assign(size_t(s.Tk * CKV), 0.0f);
        w.dv.assign(size_t(s.Tk * CKV), 0.0f);
        attention_backward(w.dq.data(), w.dk.data(), w.dv.data(), w.dout.data(), w.q.data(),
                           w.k.data(), w.v.data(), w.out.data(), lse + b * s.NH * s.Tq, one);
        // Accumulate, as the fp32 entry does, into the caller's strided gradients.
        for (int64_t r = 0; r < s.Tq; ++r)
            for (int64_t c = 0; c < C; ++c)
                dq[(b * s.Tq + r) * s.ldq + c] += w.dq[size_t(r * C + c)];
        for (int64_t r = 0; r < s.Tk; ++r)
            for (int64_t c = 0; c < CKV; ++c) {
                dk[(b * s.Tk + r) * s.ldkv + c] += w.dk[size_t(r * CKV + c)];
                dv[(b * s.Tk + r) * s.ldkv + c] += w.dv[size_t(r * CKV + c)];
            }
    }
}

int64_t attention_bf16_scratch_bytes() {
    const Widened& w = t_wide;
    size_t n = 0;
    for (const std::vector<float>* v : {&w.q, &w.k, &w.v, &w.out, &w.dout, &w.dq, &w.dk, &w.dv})
        n += v->capacity();
    int64_t bytes = int64_t(n * sizeof(float));
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    bytes += int64_t(detail::avx512::thread_scratch_buffer<detail::avx512::Pair>().n *
                     sizeof(detail::avx512::Pair));
#endif
    return bytes;
}

int64_t attention_bf16_scratch_bytes(const AttentionShape& s) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (attention_bf16_native(s.HS))
        return detail::attention_bf16_avx512_scratch_words(s) * int64_t(sizeof(uint32_t));
#endif
    // One sequence of q, k, v, out, dout, dq, dk and dv in fp32.
    const int64_t C = s.NH * s.HS, CKV = detail::kv_heads(s) * s.HS;
    return int64_t(sizeof(float)) * 4 * (s.Tq * C + s.Tk * CKV);
}

}  // namespace weft::kernels
