#include "weft/model/cp_attention.hpp"

#include <algorithm>
#include <limits>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/model/cp_kernels.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

// The kernel call of one (query part, key part) pair of sequence b: queries at rows qrow,
// keys and values at rows krow of a dense [B*T, KV] block.
struct Pair {
    int64_t qrow, krow;
    k::AttentionShape shape;
};

Pair pair_of(const k::ZigzagBlock& blk, int64_t b, const CpAttentionShape& s, int64_t chunk) {
    const int64_t KV = s.NKV * s.HS;
    return {b * s.T + blk.q_part * chunk, b * s.T + blk.k_part * chunk,
            k::AttentionShape{1, chunk, chunk, s.NH, s.HS, s.ldq, KV, s.NH * s.HS, blk.q_pos0,
                              s.NKV, blk.k_pos0}};
}

// This rank's keys and values into the first ring block, dense so that a shift is one message
// (backward: dq zeroed too, since the calls accumulate into it).
template <class T>
void stage_kv(T* first, const T* k, const T* v, const CpAttentionShape& s, float* dq = nullptr) {
    const int64_t KV = s.NKV * s.HS, n = s.B * s.T * KV;
    for (int64_t r = 0; r < s.B * s.T; ++r) {
        if (dq) std::fill_n(dq + r * s.ldq, s.NH * s.HS, 0.0f);
        std::copy_n(k + r * s.ldkv, KV, first + r * KV);
        std::copy_n(v + r * s.ldkv, KV, first + n + r * KV);
    }
}

// After a backward step: the dK|dV accumulator (`floats` at cur) to the next rank, this
// rank's arriving in `next` (after the last step, each block's own: home); one step, no shift.
void pass_accumulator(CpComm& cp, float* cur, float* next, int64_t floats, int steps) {
    if (steps > 1) {
        cp.start_shift(cur, next, floats);
        cp.wait_shift();
    } else {
        std::copy_n(cur, floats, next);
    }
}

// The per-document ring's steps: cp lists of calls a row (one per source rank) turn the ring;
// one a row (this rank's keys: no document of the micro-batch on two ranks) does not.
int doc_ring_steps(const CpAttentionShape& s, int cp) {
    const int64_t lists = int64_t(s.doc_blocks.size());
    WEFT_CHECK(lists == s.B * cp || lists == s.B,
               "internal: {} lists of per-document blocks for {} rows at cp {}", lists, s.B, cp);
    return lists == s.B ? 1 : cp;
}

// Row b's calls against source rank src's keys.
const std::vector<CpDocBlock>& doc_list(const CpAttentionShape& s, int64_t b, int src, int steps) {
    return s.doc_blocks[size_t(steps > 1 ? b * steps + src : b)];
}

// The accumulated dK|dV home (`home`, dense) into dk and dv.
void unstage_dkv(const float* home, float* dk, float* dv, const CpAttentionShape& s) {
    const int64_t KV = s.NKV * s.HS, n = s.B * s.T * KV;
    for (int64_t r = 0; r < s.B * s.T; ++r) {
        std::copy_n(home + r * KV, KV, dk + r * s.ldkv);
        std::copy_n(home + n + r * KV, KV, dv + r * s.ldkv);
    }
}

}  // namespace

CpAttention::CpAttention(CpComm& cp, int64_t T_global, bool ulysses, CpComm* ring,
                         bool bidirectional)
    : cp_(cp),
      rank_(cp.rank()),
      size_(cp.size()),
      z_(k::zigzag(T_global, cp.size())),
      ulysses_(ulysses || ring),
      bidirectional_(bidirectional) {
    WEFT_CHECK(!bidirectional || !ulysses_,
               "internal: the bidirectional ring (TokenRing) with Ulysses or the hybrid");
    if (ring) {
        across_ = std::make_unique<CpAttention>(*ring, T_global);
        const int64_t c = across_->z_.chunk, sub = c / size_;
        WEFT_CHECK(c % size_ == 0, "internal: chunks of {} over Ulysses groups of {}", c, size_);
        const std::vector<int64_t>& group = across_->positions();
        full_T_ = 2 * c;
        for (int u = 0; u < size_; ++u) {
            slots_.emplace_back();
            for (int64_t part = 0; part < 2; ++part)
                for (int64_t t = 0; t < sub; ++t) slots_.back().push_back(part * c + u * sub + t);
        }
        for (int64_t slot : slots_[size_t(rank_)]) positions_.push_back(group[size_t(slot)]);
        return;
    }
    positions_ = k::zigzag_positions(z_, rank_);
    if (ulysses_) {
        full_T_ = T_global;
        for (int r = 0; r < size_; ++r) slots_.push_back(k::zigzag_positions(z_, r));
    }
}

CpAttention::~CpAttention() = default;

int64_t CpAttention::scratch_floats(CpRegion region, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                    int64_t HS, int64_t U, bool bf16) {
    const int64_t A = NH * HS, KV = NKV * HS, rows = B * T;
    // One (query part, key part) pair's result: a chunk of T/2 rows and its lse (under bf16 the
    // kernel's bf16 output too, widened into it for the merge).
    const int64_t part = T / 2 * (A + NH) + (bf16 ? (T / 2 * A + 1) / 2 : 0);
    switch (region) {
        case CpRegion::ring:
            // Two blocks of K|V and their dK|dV (bf16: K|V in half the floats).
            // And the per-document ring's running lse rows of a call (ensure_part).
            return (bf16 ? 6 : 8) * rows * KV + part + T / 2 * NH;
        case CpRegion::token_ring:
            // Travelling blocks 2 x (q, dO, out, lse); home K/V and dK/dV; two partials sent
            // and one received (out and lse); this rank's dQ. Under bf16 q, dO, out and K/V take
            // half the floats (the lse from a 4-byte boundary). And the per-document calls'
            // running lse rows, as the ring's.
            return 2 * ((bf16 ? (3 * rows * A + 1) / 2 : 3 * rows * A) + rows * NH) +
                   (bf16 ? 3 : 4) * rows * KV + 3 * rows * (A + NH) + rows * A + part + T / 2 * NH;
        case CpRegion::ulysses:
            // Send and receive staging of a query-width tensor (fp32: dQ goes back so); dO (bf16
            // under bf16), dQ, dK, dV of the heads.
            return 2 * rows * A + (bf16 ? (rows * A + 1) / 2 : rows * A) + rows * A + 2 * rows * KV;
        case CpRegion::hybrid:
            // dO's buffer holds the ring's fp32 output in forward, so the Ulysses part is fp32's.
            return scratch_floats(CpRegion::ulysses, B, T, NH, NKV, HS) +
                   scratch_floats(CpRegion::ring, B, T * U, NH / U, NKV / U, HS, 1, bf16);
    }
    return 0;
}

int64_t CpAttention::allocated_scratch_floats() const {
    int64_t n = 0;
    for (const Buffer* b :
         {&ring_[0], &ring_[1], &part_, &part_lse_, &part16_, &home_kv_, &returns_[0], &returns_[1],
          &returned_, &own_dq_, &send_, &recv_, &dof_, &dqf_, &dkf_, &dvf_})
        n += b->size();
    return n + (across_ ? across_->allocated_scratch_floats() : 0);
}

void CpAttention::ensure(int64_t floats) {
    if (ring_floats_ >= floats) return;
    ring_[0] = Buffer(floats);
    ring_[1] = Buffer(floats);
    ring_floats_ = floats;
}

template <class T>
void CpAttention::forward(float* out, float* lse, const T* q, const T* kk, const T* v,
                          const CpAttentionShape& s) {
    if (ulysses_) return ulysses_forward(out, lse, q, kk, v, s);
    if (bidirectional_) return token_ring_forward(out, lse, q, kk, v, s);
    if (!s.doc_blocks.empty()) return doc_ring_forward(out, lse, q, kk, v, s);
    ring_forward(out, lse, q, kk, v, s);
}

void CpAttention::ensure_part(int64_t c, const CpAttentionShape& s, bool bf16) {
    const int64_t A = s.NH * s.HS;
    part_.ensure(c * A);
    // Twice a call's: the per-document ring merges its running lse rows in the second half.
    part_lse_.ensure(2 * s.NH * c);
    if (bf16) part16_.ensure((c * A + 1) / 2);
}

template <class T>
void CpAttention::ring_forward(float* out, float* lse, const T* q, const T* kk, const T* v,
                               const CpAttentionShape& s) {
    const int64_t c = z_.chunk, KV = s.NKV * s.HS, n = s.B * s.T * KV;
    WEFT_CHECK(s.T == 2 * c, "internal: {} local positions at cp {} of a sequence of {}", s.T,
               size_, z_.T);
    ensure(cp::floats_of<T>(2 * n) + 2 * n);
    ensure_part(c, s, sizeof(T) == 2);
    uint16_t* part16 = reinterpret_cast<uint16_t*>(part16_.data());
    const std::vector<std::vector<int64_t>> docs = cp::row_starts(s.cu_seqlens, s.B, z_.T);
    // Documents each on one rank: the own block is all there is to score, and nothing travels.
    const int steps = cp::documents_cross_ranks(docs, z_) ? size_ : 1;
    // The block this rank starts with: its own keys and values, dense so that a shift is one
    // message.
    stage_kv(reinterpret_cast<T*>(ring_[0].data()), kk, v, s);
    // Running results start empty: lse = -inf, and the first merge copies the first block.
    std::fill_n(lse, s.B * 2 * s.NH * c, -std::numeric_limits<float>::infinity());
    for (int step = 0; step < steps; ++step) {
        T* cur = reinterpret_cast<T*>(ring_[step % 2].data());
        if (step + 1 < steps)
            cp_.start_shift(cur, reinterpret_cast<T*>(ring_[(step + 1) % 2].data()), 2 * n);
        const int src = (rank_ - step + size_) % size_;
        for (const k::ZigzagBlock& blk : k::zigzag_blocks(z_, rank_, src)) {
            if (blk.mask == k::BlockMask::masked) continue;
            for (int64_t b = 0; b < s.B; ++b) {
                const Pair p = pair_of(blk, b, s, c);
                if (!cp::attend_fp32(part_.data(), part16, part_lse_.data(), q + p.qrow * s.ldq,
                                     cur + p.krow * KV, cur + n + p.krow * KV, p.shape,
                                     docs[size_t(b)]))
                    continue;  // no document spans both chunks
                const k::MergeShape ms{1, c, s.NH, s.HS, s.ldo, s.NH * s.HS};
                k::attention_merge(out + p.qrow * s.ldo, lse + (b * 2 + blk.q_part) * s.NH * c,
                                   part_.data(), part_lse_.data(), ms);
            }
        }
        if (step + 1 < steps) cp_.wait_shift();
    }
}

template <class T>
void CpAttention::backward(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* kk,
                           const T* v, const T* out, const float* lse, const CpAttentionShape& s) {
    if (ulysses_) return ulysses_backward(dq, dk, dv, dout, lse, s);
    if (bidirectional_) return token_ring_backward(dq, dk, dv, dout, q, kk, v, out, lse, s);
    if (!s.doc_blocks.empty()) return doc_ring_backward(dq, dk, dv, dout, q, kk, v, out, lse, s);
    ring_backward(dq, dk, dv, dout, q, kk, v, out, lse, s);
}

template <class T>
void CpAttention::ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q,
                                const T* kk, const T* v, const T* out, const float* lse,
                                const CpAttentionShape& s) {
    const int64_t c = z_.chunk, KV = s.NKV * s.HS, n = s.B * s.T * KV;
    // Each ring buffer: the K|V block in T, then its fp32 dK|dV accumulator.
    const int64_t acc = cp::floats_of<T>(2 * n);
    ensure(acc + 2 * n);
    stage_kv(reinterpret_cast<T*>(ring_[0].data()), kk, v, s, dq);
    std::fill_n(ring_[0].data() + acc, 2 * n, 0.0f);
    const std::vector<std::vector<int64_t>> docs = cp::row_starts(s.cu_seqlens, s.B, z_.T);
    const int steps = cp::documents_cross_ranks(docs, z_) ? size_ : 1;  // as forward
    for (int step = 0; step < steps; ++step) {
        float* cur = ring_[step % 2].data();
        float* next = ring_[(step + 1) % 2].data();
        const T* kv = reinterpret_cast<const T*>(cur);
        // The next keys and values travel during this block's backward; its dK/dV accumulator
        // can only follow once this rank has added its share.
        if (step + 1 < steps)
            cp_.start_shift(reinterpret_cast<T*>(cur), reinterpret_cast<T*>(next), 2 * n);
        const int src = (rank_ - step + size_) % size_;
        for (const k::ZigzagBlock& blk : k::zigzag_blocks(z_, rank_, src)) {
            if (blk.mask == k::BlockMask::masked) continue;
            for (int64_t b = 0; b < s.B; ++b) {
                const Pair p = pair_of(blk, b, s, c);
                cp::attend_block_backward(
                    dq + p.qrow * s.ldq, cur + acc + p.krow * KV, cur + acc + n + p.krow * KV,
                    dout + p.qrow * s.ldo, q + p.qrow * s.ldq, kv + p.krow * KV,
                    kv + n + p.krow * KV, out + p.qrow * s.ldo,
                    lse + (b * 2 + blk.q_part) * s.NH * c, p.shape, docs[size_t(b)]);
            }
        }
        if (step + 1 < steps) cp_.wait_shift();
        // After the last step this sends the accumulator home (to its owner, rank + 1) and
        // receives this rank's own.
        pass_accumulator(cp_, cur + acc, next + acc, 2 * n, steps);
    }
    unstage_dkv(ring_[steps % 2].data() + acc, dk, dv, s);
}

// The per-document zigzag: the same ring of key/value blocks, but each step's calls are the
// layout's (s.doc_blocks), whose pieces need not fall on the rows' halves, so the running lse is
// kept per row ([B][NH][T]) and each call's rows of it are merged in a scratch.
template <class T>
void CpAttention::doc_ring_forward(float* out, float* lse, const T* q, const T* kk, const T* v,
                                   const CpAttentionShape& s) {
    const int64_t c = z_.chunk, KV = s.NKV * s.HS, A = s.NH * s.HS, n = s.B * s.T * KV;
    const int steps = doc_ring_steps(s, size_);
    WEFT_CHECK(s.T == 2 * c, "internal: {} local positions at cp {} of a sequence of {}", s.T,
               size_, z_.T);
    ensure(cp::floats_of<T>(2 * n) + 2 * n);
    ensure_part(c, s, sizeof(T) == 2);
    uint16_t* part16 = reinterpret_cast<uint16_t*>(part16_.data());
    float* run_lse = part_lse_.data() + s.NH * c;
    stage_kv(reinterpret_cast<T*>(ring_[0].data()), kk, v, s);
    for (int64_t r = 0; r < s.B * s.T; ++r)
        std::fill_n(out + r * s.ldo, A, 0.0f);  // padding rows: no keys, a zero output
    std::fill_n(lse, s.B * s.NH * s.T, -std::numeric_limits<float>::infinity());
    for (int step = 0; step < steps; ++step) {
        T* cur = reinterpret_cast<T*>(ring_[step % 2].data());
        if (step + 1 < steps)
            cp_.start_shift(cur, reinterpret_cast<T*>(ring_[(step + 1) % 2].data()), 2 * n);
        const int src = (rank_ - step + size_) % size_;
        for (int64_t b = 0; b < s.B; ++b)
            for (const CpDocBlock& blk : cp::calls(doc_list(s, b, src, steps), c)) {
                const int64_t qrow = b * s.T + blk.q_row, krow = b * s.T + blk.k_row;
                cp::attend_fp32(part_.data(), part16, part_lse_.data(), q + qrow * s.ldq,
                                cur + krow * KV, cur + n + krow * KV,
                                cp::doc_shape(blk, s.NH, s.NKV, s.HS, s.ldq));
                cp::merge_call(out + qrow * s.ldo, s.ldo, lse + b * s.NH * s.T, s.T, part_.data(),
                               part_lse_.data(), run_lse, blk, s.NH, s.HS);
            }
        if (step + 1 < steps) cp_.wait_shift();
    }
}

template <class T>
void CpAttention::doc_ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q,
                                    const T* kk, const T* v, const T* out, const float* lse,
                                    const CpAttentionShape& s) {
    const int64_t KV = s.NKV * s.HS, n = s.B * s.T * KV;
    const int64_t acc = cp::floats_of<T>(2 * n);
    ensure(acc + 2 * n);
    const int64_t c = z_.chunk;
    part_lse_.ensure(2 * s.NH * c);
    const int steps = doc_ring_steps(s, size_);  // as forward
    stage_kv(reinterpret_cast<T*>(ring_[0].data()), kk, v, s, dq);
    std::fill_n(ring_[0].data() + acc, 2 * n, 0.0f);
    for (int step = 0; step < steps; ++step) {
        float* cur = ring_[step % 2].data();
        float* next = ring_[(step + 1) % 2].data();
        const T* kv = reinterpret_cast<const T*>(cur);
        if (step + 1 < steps)
            cp_.start_shift(reinterpret_cast<T*>(cur), reinterpret_cast<T*>(next), 2 * n);
        const int src = (rank_ - step + size_) % size_;
        for (int64_t b = 0; b < s.B; ++b)
            for (const CpDocBlock& blk : cp::calls(doc_list(s, b, src, steps), c)) {
                const int64_t qrow = b * s.T + blk.q_row, krow = b * s.T + blk.k_row;
                cp::lse_rows(part_lse_.data(), lse + b * s.NH * s.T, s.NH, s.T, blk.q_row, blk.Tq);
                cp::attend_block_backward(dq + qrow * s.ldq, cur + acc + krow * KV,
                                          cur + acc + n + krow * KV, dout + qrow * s.ldo,
                                          q + qrow * s.ldq, kv + krow * KV, kv + n + krow * KV,
                                          out + qrow * s.ldo, part_lse_.data(),
                                          cp::doc_shape(blk, s.NH, s.NKV, s.HS, s.ldq), {});
            }
        if (step + 1 < steps) cp_.wait_shift();
        pass_accumulator(cp_, cur + acc, next + acc, 2 * n, steps);
    }
    unstage_dkv(ring_[steps % 2].data() + acc, dk, dv, s);
}

template void CpAttention::forward(float*, float*, const float*, const float*, const float*,
                                   const CpAttentionShape&);
template void CpAttention::forward(float*, float*, const uint16_t*, const uint16_t*,
                                   const uint16_t*, const CpAttentionShape&);
template void CpAttention::backward(float*, float*, float*, const float*, const float*,
                                    const float*, const float*, const float*, const float*,
                                    const CpAttentionShape&);
template void CpAttention::backward(float*, float*, float*, const uint16_t*, const uint16_t*,
                                    const uint16_t*, const uint16_t*, const uint16_t*, const float*,
                                    const CpAttentionShape&);

}  // namespace weft::model
