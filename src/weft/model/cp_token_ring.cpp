// TokenRing (Wang et al. 2024), `--cp-kind ring --ring-bidirectional`, the third region of
// CpAttention: keys and values stay home and the query block travels one way round the ring
// (to rank + 1), while the partial (out, lse) a rank has just computed for another rank's
// queries goes straight back to that rank (step i: i hops the other way), so both directions
// of every link carry data at once. Backward mirrors it: the query block travels with its dO,
// final out and lse, dQ partials go back, and dK/dV accumulate at home with no rotation.
//
// Per step and rank (B sequences of T local rows, A = NH·HS, KV = NKV·HS): forward sends B·T·A
// floats of queries and B·T·(A + NH) of partial result, against 2·B·T·KV for the one-way ring;
// backward B·T·(3A + NH) and B·T·A, against 4·B·T·KV. So it moves more than the one-way ring
// under GQA and as much as MHA's in forward: the gain the paper reports is from both link
// directions running at once (docs/context_parallel.md).
//
// On the per-document zigzag (CpAttentionShape::doc_blocks) the blocks and messages are the
// same; a step runs the layout's calls of the block's owner against this rank's keys, which
// every rank has from the batch, so nothing but the queries says whose block it is.
#include <algorithm>
#include <limits>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/model/cp_attention.hpp"
#include "weft/model/cp_kernels.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {

constexpr float kNoKeys = -std::numeric_limits<float>::infinity();

// The kernel shape of one (query part, key part) pair: travelling blocks are dense (queries,
// dO and out A floats a row), home keys and values KV floats a row.
k::AttentionShape pair_shape(const k::ZigzagBlock& blk, const CpAttentionShape& s, int64_t c) {
    const int64_t A = s.NH * s.HS;
    return k::AttentionShape{1, c,          c,     s.NH,      s.HS, A, s.NKV * s.HS,
                             A, blk.q_pos0, s.NKV, blk.k_pos0};
}

// Folds a partial result laid out dense (rows A apart, its lse after B·T rows) into this rank's
// running (out, lse), whose lse is laid out in runs of `c` rows: [B][2][NH][c] for the rows'
// zigzag (c a chunk), [B][NH][T] for the per-document one (c = T).
void merge_returned(float* out, float* lse, const float* part, const CpAttentionShape& s,
                    int64_t c) {
    const int64_t A = s.NH * s.HS;
    const float* part_lse = part + s.B * s.T * A;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t p = 0; p < s.T / c; ++p)
            k::attention_merge(out + (b * s.T + p * c) * s.ldo, lse + (b * s.T / c + p) * s.NH * c,
                               part + (b * s.T + p * c) * A,
                               part_lse + (b * s.T / c + p) * s.NH * c,
                               k::MergeShape{1, c, s.NH, s.HS, s.ldo, A});
}

// The step loop forward and backward share. At step i this rank works on the block that
// started at rank - i (its owner) while the block moves on to rank + 1; `compute(step, owner,
// block, dst)` writes its result for the owner (from step 1 on into dst, a return buffer), which
// then goes straight back to the owner while the next step computes; what comes back to this
// rank, the previous step's return, is handed to `merge`. `steps`: size, or 1 when no
// document of the micro-batch has positions on two ranks (cp::documents_cross_ranks): then no
// block needs to leave home.
template <class T, class Compute, class Merge>
void run_steps(CpComm& cp, int rank, int size, int steps, Buffer (&ring)[2], int64_t travel,
               Buffer (&returns)[2], Buffer& returned, int64_t nret, Compute&& compute,
               Merge&& merge) {
    bool returning = false;
    for (int step = 0; step < steps; ++step) {
        const T* cur = reinterpret_cast<const T*>(ring[step % 2].data());
        if (step + 1 < steps)
            cp.start_shift(cur, reinterpret_cast<T*>(ring[(step + 1) % 2].data()), travel);
        float* dst = returns[step % 2].data();
        compute(step, (rank - step + size) % size, cur, dst);
        // The previous step's return was in flight during this step's work.
        if (returning) {
            cp.wait_return();
            merge(returned.data());
            returning = false;
        }
        if (step > 0) {
            cp.start_return(dst, returned.data(), nret, step);
            returning = true;
        }
        if (step + 1 < steps) cp.wait_shift();
    }
    if (returning) {
        cp.wait_return();
        merge(returned.data());
    }
}

}  // namespace

template <class T>
void CpAttention::token_ring_forward(float* out, float* lse, const T* q, const T* kk, const T* v,
                                     const CpAttentionShape& s) {
    const int64_t c = z_.chunk, A = s.NH * s.HS, KV = s.NKV * s.HS, rows = s.B * s.T;
    const bool by_doc = !s.doc_blocks.empty();
    WEFT_CHECK(s.T == 2 * c && (!by_doc || int64_t(s.doc_blocks.size()) == s.B * size_),
               "internal: {} local positions at cp {} of a sequence of {}, {} lists of "
               "per-document blocks",
               s.T, size_, z_.T, s.doc_blocks.size());
    const int64_t nq = rows * A, nkv = rows * KV, nret = nq + s.B * 2 * s.NH * c;
    ensure(cp::floats_of<T>(nq));
    home_kv_.ensure(cp::floats_of<T>(2 * nkv));
    returns_[0].ensure(nret);
    returns_[1].ensure(nret);
    returned_.ensure(nret);
    ensure_part(c, s, sizeof(T) == 2);
    uint16_t* part16 = reinterpret_cast<uint16_t*>(part16_.data());
    float* run_lse = part_lse_.data() + s.NH * c;
    T* kvd = reinterpret_cast<T*>(home_kv_.data());
    T* block = reinterpret_cast<T*>(ring_[0].data());
    for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(q + r * s.ldq, A, block + r * A);
        std::copy_n(kk + r * s.ldkv, KV, kvd + r * KV);
        std::copy_n(v + r * s.ldkv, KV, kvd + nkv + r * KV);
    }
    std::fill_n(lse, s.B * 2 * s.NH * c, kNoKeys);
    if (by_doc)  // padding rows see no key: a zero output
        for (int64_t r = 0; r < rows; ++r) std::fill_n(out + r * s.ldo, A, 0.0f);
    const std::vector<std::vector<int64_t>> docs = cp::row_starts(s.cu_seqlens, s.B, z_.T);
    auto compute = [&](int step, int owner, const T* cur, float* ret) {
        // Step 0 answers this rank's own queries, straight into (out, lse); later steps those
        // of the block's owner, into a partial result that goes back to it (fp32: it is summed).
        float* dst = step == 0 ? out : ret;
        float* dst_lse = step == 0 ? lse : dst + nq;
        const int64_t ld = step == 0 ? s.ldo : A;
        if (step > 0) std::fill_n(dst_lse, s.B * 2 * s.NH * c, kNoKeys);
        if (by_doc) {
            for (int64_t b = 0; b < s.B; ++b)
                for (const CpDocBlock& blk :
                     cp::calls(s.doc_blocks[size_t(b * size_ + owner)], c)) {
                    const int64_t qrow = b * s.T + blk.q_row, krow = b * s.T + blk.k_row;
                    cp::attend_fp32(part_.data(), part16, part_lse_.data(), cur + qrow * A,
                                    kvd + krow * KV, kvd + nkv + krow * KV,
                                    cp::doc_shape(blk, s.NH, s.NKV, s.HS, A));
                    cp::merge_call(dst + qrow * ld, ld, dst_lse + b * s.NH * s.T, s.T, part_.data(),
                                   part_lse_.data(), run_lse, blk, s.NH, s.HS);
                }
            return;
        }
        for (const k::ZigzagBlock& blk : k::zigzag_blocks(z_, owner, rank_)) {
            if (blk.mask == k::BlockMask::masked) continue;
            const k::AttentionShape sh = pair_shape(blk, s, c);
            for (int64_t b = 0; b < s.B; ++b) {
                const int64_t qrow = b * s.T + blk.q_part * c, krow = b * s.T + blk.k_part * c;
                if (!cp::attend_fp32(part_.data(), part16, part_lse_.data(), cur + qrow * A,
                                     kvd + krow * KV, kvd + nkv + krow * KV, sh, docs[size_t(b)]))
                    continue;  // no document spans both chunks
                k::attention_merge(dst + qrow * ld, dst_lse + (b * 2 + blk.q_part) * s.NH * c,
                                   part_.data(), part_lse_.data(),
                                   k::MergeShape{1, c, s.NH, s.HS, ld, A});
            }
        }
    };
    // The per-document layout turns the ring every micro-batch (its calls do not say whether
    // another pair of ranks has any).
    const int steps = by_doc || cp::documents_cross_ranks(docs, z_) ? size_ : 1;
    run_steps<T>(cp_, rank_, size_, steps, ring_, nq, returns_, returned_, nret, compute,
                 [&](const float* part) { merge_returned(out, lse, part, s, by_doc ? s.T : c); });
}

template <class T>
void CpAttention::token_ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q,
                                      const T* kk, const T* v, const T* out, const float* lse,
                                      const CpAttentionShape& s) {
    const int64_t c = z_.chunk, A = s.NH * s.HS, KV = s.NKV * s.HS, rows = s.B * s.T;
    const int64_t nq = rows * A, nkv = rows * KV, nlse = s.B * 2 * s.NH * c;
    const bool by_doc = !s.doc_blocks.empty();
    // The travelling block, in T: queries | dO | final out, then the final lse's floats from
    // the next 4-byte boundary (bf16: their bytes as pairs of values).
    const int64_t tsz = int64_t(sizeof(T)), lse_at = (3 * nq * tsz + 3) / 4 * 4 / tsz;
    const int64_t travel = lse_at + nlse * 4 / tsz;
    ensure(cp::floats_of<T>(travel));
    // Home: K | V in T, then the fp32 dK | dV accumulators.
    const int64_t acc_at = cp::floats_of<T>(2 * nkv);
    home_kv_.ensure(acc_at + 2 * nkv);
    returns_[0].ensure(nq);
    returns_[1].ensure(nq);
    returned_.ensure(nq);
    own_dq_.ensure(nq);
    ensure_part(c, s, sizeof(T) == 2);
    T* kvd = reinterpret_cast<T*>(home_kv_.data());
    float* acc = home_kv_.data() + acc_at;
    T* block = reinterpret_cast<T*>(ring_[0].data());
    for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(q + r * s.ldq, A, block + r * A);
        std::copy_n(dout + r * s.ldo, A, block + nq + r * A);
        std::copy_n(out + r * s.ldo, A, block + 2 * nq + r * A);
        std::copy_n(kk + r * s.ldkv, KV, kvd + r * KV);
        std::copy_n(v + r * s.ldkv, KV, kvd + nkv + r * KV);
    }
    std::copy_n(lse, nlse, reinterpret_cast<float*>(block + lse_at));
    std::fill_n(acc, 2 * nkv, 0.0f);
    std::fill_n(own_dq_.data(), nq, 0.0f);
    const std::vector<std::vector<int64_t>> docs = cp::row_starts(s.cu_seqlens, s.B, z_.T);
    auto compute = [&](int step, int owner, const T* cur, float* ret) {
        float* dst = step == 0 ? own_dq_.data() : ret;
        if (step > 0) std::fill_n(dst, nq, 0.0f);
        const float* cur_lse = reinterpret_cast<const float*>(cur + lse_at);
        if (by_doc) {
            for (int64_t b = 0; b < s.B; ++b)
                for (const CpDocBlock& blk :
                     cp::calls(s.doc_blocks[size_t(b * size_ + owner)], c)) {
                    const int64_t qrow = b * s.T + blk.q_row, krow = b * s.T + blk.k_row;
                    cp::lse_rows(part_lse_.data(), cur_lse + b * s.NH * s.T, s.NH, s.T, blk.q_row,
                                 blk.Tq);
                    cp::attend_block_backward(
                        dst + qrow * A, acc + krow * KV, acc + nkv + krow * KV, cur + nq + qrow * A,
                        cur + qrow * A, kvd + krow * KV, kvd + nkv + krow * KV,
                        cur + 2 * nq + qrow * A, part_lse_.data(),
                        cp::doc_shape(blk, s.NH, s.NKV, s.HS, A), {});
                }
            return;
        }
        for (const k::ZigzagBlock& blk : k::zigzag_blocks(z_, owner, rank_)) {
            if (blk.mask == k::BlockMask::masked) continue;
            const k::AttentionShape sh = pair_shape(blk, s, c);
            for (int64_t b = 0; b < s.B; ++b) {
                const int64_t qrow = b * s.T + blk.q_part * c, krow = b * s.T + blk.k_part * c;
                cp::attend_block_backward(
                    dst + qrow * A, acc + krow * KV, acc + nkv + krow * KV, cur + nq + qrow * A,
                    cur + qrow * A, kvd + krow * KV, kvd + nkv + krow * KV, cur + 2 * nq + qrow * A,
                    cur_lse + (b * 2 + blk.q_part) * s.NH * c, sh, docs[size_t(b)]);
            }
        }
    };
    const int steps = by_doc || cp::documents_cross_ranks(docs, z_) ? size_ : 1;  // as forward
    run_steps<T>(cp_, rank_, size_, steps, ring_, travel, returns_, returned_, nq, compute,
                 [&](const float* part) {
                     for (int64_t i = 0; i < nq; ++i) own_dq_.data()[i] += part[i];
                 });
    for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(own_dq_.data() + r * A, A, dq + r * s.ldq);
        std::copy_n(acc + r * KV, KV, dk + r * s.ldkv);
        std::copy_n(acc + nkv + r * KV, KV, dv + r * s.ldkv);
    }
}

template void CpAttention::token_ring_forward(float*, float*, const float*, const float*,
                                              const float*, const CpAttentionShape&);
template void CpAttention::token_ring_forward(float*, float*, const uint16_t*, const uint16_t*,
                                              const uint16_t*, const CpAttentionShape&);
template void CpAttention::token_ring_backward(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, const float*,
                                               const float*, const CpAttentionShape&);
template void CpAttention::token_ring_backward(float*, float*, float*, const uint16_t*,
                                               const uint16_t*, const uint16_t*, const uint16_t*,
                                               const uint16_t*, const float*,
                                               const CpAttentionShape&);

}  // namespace weft::model
