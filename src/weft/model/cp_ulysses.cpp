// DeepSpeed-Ulysses (Jacobs et al. 2023), the `--cp-kind ulysses` half of CpAttention: each rank
// trades its T/cp rows of every head for all T rows of heads/cp heads, runs the whole-sequence
// causal kernel on those, and trades the output back. Forward: four all-to-alls (q, k, v, out).
// Backward: four, as the paper has it (dout there, dq, dk, dv back), because forward keeps the
// whole-sequence q, k, v and out of this rank's heads until then: as many floats as the layer's
// own q, k, v and out of T/cp rows, which re-sending them would save at the cost of four more
// all-to-alls. Each all-to-all moves (cp-1)/cp of this rank's tensor, the same volume per rank
// whatever cp is when T grows with cp (docs/context_parallel.md). On the per-document zigzag
// (docs/long_context.md) the gather puts each rank's rows where the batch's order says, every
// document whole again, and the hybrid's ring runs its groups' calls.
#include <algorithm>
#include <span>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/cp_kernels.hpp"
#include "weft/model/kept_tensor.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

// n values from src to dst, widened where dst is fp32 and src bf16.
template <class T>
void put(T* dst, const T* src, int64_t n) {
    std::copy_n(src, n, dst);
}
void put(float* dst, const uint16_t* src, int64_t n) {
    widen_bf16(dst, src, n);
}

// The shape the hybrid's ring runs on: the group's gathered rows of this rank's heads, with the
// whole rows' documents (the rows' zigzag) or the group's calls (the per-document zigzag).
CpAttentionShape group_shape(const CpAttentionShape& s, int64_t T, int64_t Hq, int64_t Hk) {
    CpAttentionShape hs{s.B, T, Hq, Hk, s.HS, Hq * s.HS, Hk * s.HS, Hq * s.HS, s.cu_seqlens};
    hs.doc_blocks = s.doc_blocks;
    return hs;
}

// The documents of the gathered rows: the per-document zigzag's order, or the rows' own.
std::span<const int64_t> gathered_documents(const CpAttentionShape& s) {
    if (s.doc_order && !s.doc_order->slots.empty()) return s.doc_order->cu_seqlens;
    return s.cu_seqlens;
}

}  // namespace

template <class T>
void CpAttention::staging(int64_t n) {
    if (send_.size() < cp::floats_of<T>(size_ * n)) {
        send_ = Buffer(cp::floats_of<T>(size_ * n));
        recv_ = Buffer(cp::floats_of<T>(size_ * n));
    }
}

template <class T>
void CpAttention::to_heads(const T* x, int64_t heads, int64_t ld, T* full,
                           const CpAttentionShape& s) {
    const int64_t w = heads / size_ * s.HS, rows = s.B * s.T, n = rows * w;
    staging<T>(n);
    T* send = reinterpret_cast<T*>(send_.data());
    const T* recv = reinterpret_cast<const T*>(recv_.data());
    // Block j: this rank's rows of rank j's heads.
    for (int j = 0; j < size_; ++j)
        for (int64_t r = 0; r < rows; ++r) std::copy_n(x + r * ld + j * w, w, send + j * n + r * w);
    cp_.all_to_all(send, reinterpret_cast<T*>(recv_.data()), n);
    // Block i holds rank i's rows of this rank's heads: put them at their positions.
    const int64_t T_ = full_T_;
    for (int i = 0; i < size_; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t t = 0; t < s.T; ++t)
                std::copy_n(recv + i * n + (b * s.T + t) * w, w,
                            full + (b * T_ + slot(i, b, t, s)) * w);
}

template <class T, class U>
void CpAttention::from_heads(const T* full, int64_t heads, U* x, int64_t ld,
                             const CpAttentionShape& s) {
    const int64_t w = heads / size_ * s.HS, rows = s.B * s.T, n = rows * w, T_ = full_T_;
    staging<T>(n);
    T* send = reinterpret_cast<T*>(send_.data());
    const T* recv = reinterpret_cast<const T*>(recv_.data());
    for (int i = 0; i < size_; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t t = 0; t < s.T; ++t)
                std::copy_n(full + (b * T_ + slot(i, b, t, s)) * w, w,
                            send + i * n + (b * s.T + t) * w);
    cp_.all_to_all(send, reinterpret_cast<T*>(recv_.data()), n);
    for (int j = 0; j < size_; ++j)
        for (int64_t r = 0; r < rows; ++r) put(x + r * ld + j * w, recv + j * n + r * w, w);
}

int64_t CpAttention::kept_floats() const {
    int64_t n = 0;
    for (const auto& [lse, b] : saved_) n += b.size();
    return n;
}

template <class T>
void CpAttention::ulysses_forward(float* out, float* lse, const T* q, const T* kk, const T* v,
                                  const CpAttentionShape& s) {
    WEFT_CHECK(s.NH % size_ == 0 && s.NKV % size_ == 0,
               "internal: {} heads and {} kv heads under Ulysses over {} ranks", s.NH, s.NKV,
               size_);
    const bool in_order = s.doc_order && !s.doc_order->slots.empty();
    WEFT_CHECK(across_ ? !in_order : s.doc_blocks.empty(),
               "internal: the per-document zigzag's {} under {}",
               across_ ? "gather order" : "ring calls", across_ ? "the hybrid" : "Ulysses");
    WEFT_CHECK(!in_order || int64_t(s.doc_order->slots.size()) == s.B * size_ * s.T,
               "internal: {} gather slots for {} rows of {} at cp {}",
               s.doc_order ? s.doc_order->slots.size() : 0, s.B, s.T, size_);
    const int64_t T_ = full_T_, Hq = s.NH / size_, Hk = s.NKV / size_;
    const int64_t nq = s.B * T_ * Hq * s.HS, nk = s.B * T_ * Hk * s.HS;
    // A forward again (recomputation, or the next micro-batch in these activations) replaces
    // what the last one kept.
    auto [it, fresh] = saved_.try_emplace(lse);
    Buffer& keep = it->second;
    if (fresh && !spare_.empty()) {
        keep = std::move(spare_.back());
        spare_.pop_back();
    }
    keep.ensure(cp::floats_of<T>(2 * nq + 2 * nk));
    T* qf = reinterpret_cast<T*>(keep.data());
    T *kf = qf + nq, *vf = kf + nk, *of = vf + nk;
    to_heads(q, s.NH, s.ldq, qf, s);
    to_heads(kk, s.NKV, s.ldkv, kf, s);
    to_heads(v, s.NKV, s.ldkv, vf, s);
    // lse: [B][NH/cp][T], as many floats as the [B][NH][T/cp] the layer keeps (the hybrid's
    // ring: [B][2][NH/U][T/2G], as many again).
    // The hybrid's ring takes the whole rows' documents (its chunks are positions of those
    // rows) or, on the per-document zigzag, the group's calls.
    if (across_) {
        // The ring's merged output is fp32: straight into `of`, or under bf16 into dof_ (free
        // until backward) and kept rounded.
        float* merged = reinterpret_cast<float*>(of);
        if constexpr (sizeof(T) != sizeof(float)) {
            dof_.ensure(nq);
            merged = dof_.data();
        }
        across_->forward(merged, lse, static_cast<const T*>(qf), kf, vf,
                         group_shape(s, T_, Hq, Hk));
        if constexpr (sizeof(T) != sizeof(float))
            k::convert_fp32_to_bf16(reinterpret_cast<uint16_t*>(of), merged, 1, nq, nq);
    } else {
        const k::AttentionShape sh{s.B,       T_,        T_, Hq, s.HS, Hq * s.HS,
                                   Hk * s.HS, Hq * s.HS, 0,  Hk, 0};
        const std::span<const int64_t> cu = gathered_documents(s);
        if (cu.empty()) {
            cp::attend(of, lse, qf, kf, vf, sh);
        } else {
            cp::attend(of, lse, qf, kf, vf, sh, cu);
        }
    }
    from_heads(static_cast<const T*>(of), s.NH, out, s.ldo, s);
}

template <class T>
void CpAttention::ulysses_backward(float* dq, float* dk, float* dv, const T* dout, const float* lse,
                                   const CpAttentionShape& s) {
    const int64_t T_ = full_T_, Hq = s.NH / size_, Hk = s.NKV / size_;
    const int64_t nq = s.B * T_ * Hq * s.HS, nk = s.B * T_ * Hk * s.HS;
    auto it = saved_.find(lse);
    WEFT_CHECK(it != saved_.end(), "internal: a Ulysses backward without its forward");
    const T* qf = reinterpret_cast<const T*>(it->second.data());
    const T *kf = qf + nq, *vf = kf + nk, *of = vf + nk;
    dof_.ensure(cp::floats_of<T>(nq));
    dqf_.ensure(nq);
    dkf_.ensure(nk);
    dvf_.ensure(nk);
    T* dof = reinterpret_cast<T*>(dof_.data());
    to_heads(dout, s.NH, s.ldo, dof, s);
    std::fill_n(dqf_.data(), nq, 0.0f);
    std::fill_n(dkf_.data(), nk, 0.0f);
    std::fill_n(dvf_.data(), nk, 0.0f);
    if (across_) {
        across_->backward(dqf_.data(), dkf_.data(), dvf_.data(), static_cast<const T*>(dof), qf, kf,
                          vf, of, lse, group_shape(s, T_, Hq, Hk));
    } else {
        const k::AttentionShape sh{s.B,       T_,        T_, Hq, s.HS, Hq * s.HS,
                                   Hk * s.HS, Hq * s.HS, 0,  Hk, 0};
        const std::span<const int64_t> cu = gathered_documents(s);
        if (cu.empty()) {
            cp::attend_backward(dqf_.data(), dkf_.data(), dvf_.data(), dof, qf, kf, vf, of, lse,
                                sh);
        } else {
            cp::attend_backward(dqf_.data(), dkf_.data(), dvf_.data(), dof, qf, kf, vf, of, lse, sh,
                                cu);
        }
    }
    spare_.push_back(std::move(it->second));
    saved_.erase(it);
    from_heads(static_cast<const float*>(dqf_.data()), s.NH, dq, s.ldq, s);
    from_heads(static_cast<const float*>(dkf_.data()), s.NKV, dk, s.ldkv, s);
    from_heads(static_cast<const float*>(dvf_.data()), s.NKV, dv, s.ldkv, s);
}

template void CpAttention::ulysses_forward(float*, float*, const float*, const float*, const float*,
                                           const CpAttentionShape&);
template void CpAttention::ulysses_forward(float*, float*, const uint16_t*, const uint16_t*,
                                           const uint16_t*, const CpAttentionShape&);
template void CpAttention::ulysses_backward(float*, float*, float*, const float*, const float*,
                                            const CpAttentionShape&);
template void CpAttention::ulysses_backward(float*, float*, float*, const uint16_t*, const float*,
                                            const CpAttentionShape&);

}  // namespace weft::model
