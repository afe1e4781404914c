// DeepSpeed-Ulysses (Jacobs et al. 2023), the `--cp-kind ulysses` half of CpAttention: each rank
// trades its T/cp rows of every head for all T rows of heads/cp heads, runs the whole-sequence
// causal kernel on those, and trades the output back. Forward: four all-to-alls (q, k, v, out).
// Backward: four, as the paper has it (dout there, dq, dk, dv back), because forward keeps the
// whole-sequence q, k, v and out of this rank's heads until then: as many floats as the layer's
// own q, k, v and out of T/cp rows, which re-sending them would save at the cost of four more
// all-to-alls. Each all-to-all moves (cp-1)/cp of this rank's tensor, the same volume per rank
// whatever cp is when T grows with cp (docs/context_parallel.md).
#include <algorithm>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/model/cp_attention.hpp"

namespace weft::model {

namespace k = weft::kernels;

void CpAttention::to_heads(const float* x, int64_t heads, int64_t ld, float* full,
                           const CpAttentionShape& s) {
    const int64_t w = heads / size_ * s.HS, rows = s.B * s.T, n = rows * w;
    if (send_.size() < size_ * n) {
        send_ = Buffer(size_ * n);
        recv_ = Buffer(size_ * n);
    }
    // Block j: this rank's rows of rank j's heads.
    for (int j = 0; j < size_; ++j)
        for (int64_t r = 0; r < rows; ++r)
            std::copy_n(x + r * ld + j * w, w, send_.data() + j * n + r * w);
    cp_.all_to_all(send_.data(), recv_.data(), n);
    // Block i holds rank i's rows of this rank's heads: put them at their positions.
    const int64_t T = full_T_;
    for (int i = 0; i < size_; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t t = 0; t < s.T; ++t)
                std::copy_n(recv_.data() + i * n + (b * s.T + t) * w, w,
                            full + (b * T + slots_[size_t(i)][size_t(t)]) * w);
}

void CpAttention::from_heads(const float* full, int64_t heads, float* x, int64_t ld,
                             const CpAttentionShape& s) {
    const int64_t w = heads / size_ * s.HS, rows = s.B * s.T, n = rows * w, T = full_T_;
    if (send_.size() < size_ * n) {
        send_ = Buffer(size_ * n);
        recv_ = Buffer(size_ * n);
    }
    for (int i = 0; i < size_; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t t = 0; t < s.T; ++t)
                std::copy_n(full + (b * T + slots_[size_t(i)][size_t(t)]) * w, w,
                            send_.data() + i * n + (b * s.T + t) * w);
    cp_.all_to_all(send_.data(), recv_.data(), n);
    for (int j = 0; j < size_; ++j)
        for (int64_t r = 0; r < rows; ++r)
            std::copy_n(recv_.data() + j * n + r * w, w, x + r * ld + j * w);
}

int64_t CpAttention::kept_floats() const {
    int64_t n = 0;
    for (const auto& [lse, b] : saved_) n += b.size();
    return n;
}

void CpAttention::ulysses_forward(float* out, float* lse, const float* q, const float* kk,
                                  const float* v, const CpAttentionShape& s) {
    WEFT_CHECK(s.NH % size_ == 0 && s.NKV % size_ == 0,
               "internal: {} heads and {} kv heads under Ulysses over {} ranks", s.NH, s.NKV,
               size_);
    const int64_t T = full_T_, Hq = s.NH / size_, Hk = s.NKV / size_;
    const int64_t nq = s.B * T * Hq * s.HS, nk = s.B * T * Hk * s.HS;
    // A forward again (recomputation, or the next micro-batch in these activations) replaces
    // what the last one kept.
    auto [it, fresh] = saved_.try_emplace(lse);
    Buffer& keep = it->second;
    if (fresh && !spare_.empty()) {
        keep = std::move(spare_.back());
        spare_.pop_back();
    }
    keep.ensure(2 * nq + 2 * nk);
    float *qf = keep.data(), *kf = qf + nq, *vf = kf + nk, *of = vf + nk;
    to_heads(q, s.NH, s.ldq, qf, s);
    to_heads(kk, s.NKV, s.ldkv, kf, s);
    to_heads(v, s.NKV, s.ldkv, vf, s);
    // lse: [B][NH/cp][T], as many floats as the [B][NH][T/cp] the layer keeps (the hybrid's
    // ring: [B][2][NH/U][T/2G], as many again).
    if (across_) {
        across_->forward(of, lse, qf, kf, vf,
                         {s.B, T, Hq, Hk, s.HS, Hq * s.HS, Hk * s.HS, Hq * s.HS});
    } else {
        const k::AttentionShape sh{s.B, T, T, Hq, s.HS, Hq * s.HS, Hk * s.HS, Hq * s.HS, 0, Hk, 0};
        k::attention_forward(of, lse, qf, kf, vf, sh);
    }
    from_heads(of, s.NH, out, s.ldo, s);
}

void CpAttention::ulysses_backward(float* dq, float* dk, float* dv, const float* dout,
                                   const float* /*q*/, const float* /*k*/, const float* /*v*/,
                                   const float* /*out*/, const float* lse,
                                   const CpAttentionShape& s) {
    const int64_t T = full_T_, Hq = s.NH / size_, Hk = s.NKV / size_;
    const int64_t nq = s.B * T * Hq * s.HS, nk = s.B * T * Hk * s.HS;
    auto it = saved_.find(lse);
    WEFT_CHECK(it != saved_.end(), "internal: a Ulysses backward without its forward");
    const float *qf = it->second.data(), *kf = qf + nq, *vf = kf + nk, *of = vf + nk;
    dof_.ensure(nq);
    dqf_.ensure(nq);
    dkf_.ensure(nk);
    dvf_.ensure(nk);
    to_heads(dout, s.NH, s.ldo, dof_.data(), s);
    std::fill_n(dqf_.data(), nq, 0.0f);
    std::fill_n(dkf_.data(), nk, 0.0f);
    std::fill_n(dvf_.data(), nk, 0.0f);
    if (across_) {
        across_->backward(dqf_.data(), dkf_.data(), dvf_.data(), dof_.data(), qf, kf, vf, of, lse,
                          {s.B, T, Hq, Hk, s.HS, Hq * s.HS, Hk * s.HS, Hq * s.HS});
    } else {
        const k::AttentionShape sh{s.B, T, T, Hq, s.HS, Hq * s.HS, Hk * s.HS, Hq * s.HS, 0, Hk, 0};
        k::attention_backward(dqf_.data(), dkf_.data(), dvf_.data(), dof_.data(), qf, kf, vf, of,
                              lse, sh);
    }
    spare_.push_back(std::move(it->second));
    saved_.erase(it);
    from_heads(dqf_.data(), s.NH, dq, s.ldq, s);
    from_heads(dkf_.data(), s.NKV, dk, s.ldkv, s);
    from_heads(dvf_.data(), s.NKV, dv, s.ldkv, s);
}

}  // namespace weft::model
