#pragma once
// Ring attention over a context-parallel group (Liu et al.'s ring attention, zigzag-balanced):
// the region a model calls in place of its local causal attention when each sequence is split
// over cp ranks. No MPI here: the ring shifts are the CpComm's.
//
// Each rank holds, per sequence, its two zigzag chunks (kernels/attention/zigzag.hpp) as T/cp
// consecutive rows: part 0 then part 1. Forward: the key/value block (kv heads only, so GQA
// moves NKV/NH of the query width) rotates cp - 1 times around the ring, the next block's
// transfer started before the current block's attention (double-buffered); each visible
// (query part, key part) pair is one kernel call merged into a running (out, lse). Backward:
// the blocks rotate again; each block's dK/dV accumulator travels with it and arrives home after
// cp shifts, while dQ accumulates here. docs/context_parallel.md counts the bytes.
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/kernels/attention/zigzag.hpp"
#include "weft/model/cp_comm.hpp"
#include "weft/model/cp_doc_block.hpp"

namespace weft::model {

// Where one micro-batch's attention inputs live: rows of B sequences of T (local) positions,
// q, k, v and out `ldq`, `ldkv`, `ldo` floats apart (k and v may be views into a fused qkv).
struct CpAttentionShape {
    int64_t B, T, NH, NKV, HS;
    int64_t ldq, ldkv, ldo;
    // Packed documents (Activations::cu_seqlens) over the whole sequences' B*T_global rows;
    // empty: one sequence a row. Ulysses runs its whole sequences through the varlen kernel; the
    // rings keep the rows' zigzag split and mask each (query part, key part) block by document
    // (kernels/attention/varlen.hpp, *_block_documents), skipping blocks no document spans.
    std::span<const int64_t> cu_seqlens = {};
    // The per-document zigzag (data/doc_zigzag.hpp, docs/long_context.md): when not empty, each
    // rank's T rows of sequence b are its pieces of that sequence's documents (padding after),
    // and doc_blocks[b * cp + k] lists the kernel calls between this rank and rank k in it: the
    // ring's, of this rank's queries against rank k's keys (which travel here); TokenRing's, of
    // rank k's queries (which travel here) against this rank's keys. The rings run those calls
    // instead of the rows' zigzag blocks, and lse is laid out [B][NH][T]. The hybrid's ring runs
    // over its groups' rows (the lists then the group's against group k's: each group's rows are
    // a ring rank's of the layout over its G groups, rank u of it holding the u-th 1/U of each
    // half, as in the rows' zigzag). When no document of the micro-batch has pieces on two ranks,
    // the ring's (and the hybrid's ring's) doc_blocks[b] alone, this rank's keys' calls: the ring
    // does not turn.
    std::span<const std::vector<CpDocBlock>> doc_blocks = {};
    // Ulysses on the per-document zigzag (null or empty: the zigzag positions and cu_seqlens):
    // the gather puts each rank's rows where doc_order->slots says and runs the varlen kernel
    // on doc_order->cu_seqlens.
    const CpDocOrder* doc_order = nullptr;
};

// The four ways CpAttention runs (scratch_floats counts each).
enum class CpRegion { ring, token_ring, ulysses, hybrid };

// Positions of a sequence one attention kernel call sees in `region` at cp ranks of T_local rows
// each (U: the hybrid's Ulysses group): the ring's pairs of half-chunks, Ulysses' whole
// sequence, the hybrid's ring over U ranks' rows. The bf16 kernel's scratch grows with it.
inline int64_t cp_call_length(CpRegion region, int64_t T_local, int cp, int U) {
    switch (region) {
        case CpRegion::ulysses:
            return T_local * cp;
        case CpRegion::hybrid:
            return T_local * U / 2;
        default:
            return T_local / 2;
    }
}

class CpAttention {
  public:
    // `cp` must outlive this object; T_global is the whole sequence length. With `ulysses`,
    // attention runs as DeepSpeed-Ulysses instead of a ring (cp_ulysses.cpp): all-to-alls turn
    // [B, T/cp, heads] into [B, T, heads/cp], the whole-sequence kernel runs on this rank's
    // heads, and an all-to-all turns the output back; heads and kv heads must divide by cp.
    // Ulysses keeps each forward's whole-sequence q, k, v and out until the backward given the
    // same `lse` (one per micro-batch and layer, as the model lays them out), so that backward
    // trades only dout, dq, dk and dv.
    // With `ring` as well (the hybrid, USP): `cp` is this rank's Ulysses group of U ranks and
    // `ring` the ring across the G groups (both must outlive this object). Ranks are numbered
    // g·U + u; group g holds the zigzag chunks g and 2G-1-g of a ring over G, and its rank u the
    // u-th 1/U of each, so that Ulysses gathers exactly the group's two chunks for heads/U
    // heads, and the ring runs on those as it would over G ranks.
    // With `bidirectional` (ring only: TokenRing, cp_token_ring.cpp), keys and values stay home:
    // query blocks travel round the ring and each partial (out, lse) goes back to the rank whose
    // queries it answers, so both directions of the links carry data.
    CpAttention(CpComm& cp, int64_t T_global, bool ulysses = false, CpComm* ring = nullptr,
                bool bidirectional = false);
    ~CpAttention();

    // This rank's place among all the context-parallel ranks, and their number.
    int rank() const { return across_ ? across_->rank() * size_ + rank_ : rank_; }
    int size() const { return across_ ? across_->size() * size_ : size_; }
    // The absolute position of each of this rank's T_global / size() rows of a sequence.
    const std::vector<int64_t>& positions() const { return positions_; }
    bool ulysses() const { return ulysses_; }
    bool bidirectional() const { return bidirectional_; }
    CpRegion region() const {
        return across_          ? CpRegion::hybrid
               : ulysses_       ? CpRegion::ulysses
               : bidirectional_ ? CpRegion::token_ring
                                : CpRegion::ring;
    }
    // The hybrid's Ulysses group size (1 otherwise).
    int ulysses_group() const { return across_ ? size_ : 1; }
    // Floats Ulysses holds from forwards whose backward has not run (Activations count them:
    // LayerSpan::ulysses_kept).
    int64_t kept_floats() const;
    // Floats of scratch the region allocates for micro-batches of B sequences of T local rows
    // (NH, NKV: this tp rank's heads; U: the hybrid's Ulysses group), held for the run and
    // reused by every layer: the ring's two K/V (and dK/dV) blocks; TokenRing's two travelling
    // query blocks with dO, out and lse, its home K/V and dK/dV, returned partials and dQ;
    // Ulysses' all-to-all staging and whole-sequence dO, dQ, dK, dV (the hybrid: those and its
    // ring's); each plus one block's partial result. Independent of cp for all but the hybrid's
    // ring. What Ulysses keeps between forward and backward is activations (kept_floats).
    // With `bf16`, the region runs on bf16 operands (forward<uint16_t>).
    static int64_t scratch_floats(CpRegion region, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                  int64_t HS, int64_t U = 1, bool bf16 = false);
    // What this region has allocated so far, kept floats aside.
    int64_t allocated_scratch_floats() const;

    // out (ldo rows) and lse ([B][2][NH][chunk]: per sequence and part, the kernel's layout)
    // of causal attention over the whole sequence for this rank's queries. T is float, or
    // uint16_t for bf16 q, k, v (and out, dout) at the same addressing (--dtype bf16): then the
    // bf16 kernel runs (kernels::attention_forward_bf16), and every region sends bf16 but what
    // is summed: the ring's key/value blocks, Ulysses' q, k, v, out and dout (and what it
    // keeps), TokenRing's travelling queries (with dO and out) are bf16; the ring's running out
    // and lse, dq, the dK/dV accumulators that travel the ring, TokenRing's returned partial
    // results and the gradients Ulysses trades back are fp32. out is fp32 either way (the
    // caller rounds it).
    template <class T>
    void forward(float* out, float* lse, const T* q, const T* k, const T* v,
                 const CpAttentionShape& s);
    // dq, dk, dv (same addressing as q, k, v) are overwritten.
    template <class T>
    void backward(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                  const T* v, const T* out, const float* lse, const CpAttentionShape& s);

  private:
    void ensure(int64_t floats);
    // A call's partial result, chunk `c` rows (and its lse twice over: the per-document rings'
    // running lse rows; bf16: the kernel's bf16 output).
    void ensure_part(int64_t c, const CpAttentionShape& s, bool bf16);
    // The ring, on fp32 or bf16 (uint16_t) operands.
    template <class T>
    void ring_forward(float* out, float* lse, const T* q, const T* k, const T* v,
                      const CpAttentionShape& s);
    template <class T>
    void doc_ring_forward(float* out, float* lse, const T* q, const T* k, const T* v,
                          const CpAttentionShape& s);
    template <class T>
    void doc_ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                           const T* v, const T* out, const float* lse, const CpAttentionShape& s);
    template <class T>
    void ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                       const T* v, const T* out, const float* lse, const CpAttentionShape& s);
    // TokenRing on fp32 or bf16 (uint16_t) operands: the travelling blocks are in T (and the
    // lse in fp32), the partial results sent back fp32.
    template <class T>
    void token_ring_forward(float* out, float* lse, const T* q, const T* k, const T* v,
                            const CpAttentionShape& s);
    template <class T>
    void token_ring_backward(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                             const T* v, const T* out, const float* lse, const CpAttentionShape& s);
    // Ulysses (and the hybrid) on fp32 or bf16 (uint16_t) operands: what forward keeps, the
    // whole sequence of this rank's heads, is in T; the gradients are fp32. Backward reads only
    // what forward kept (by lse) and dout.
    template <class T>
    void ulysses_forward(float* out, float* lse, const T* q, const T* k, const T* v,
                         const CpAttentionShape& s);
    template <class T>
    void ulysses_backward(float* dq, float* dk, float* dv, const T* dout, const float* lse,
                          const CpAttentionShape& s);
    // Ulysses: x's rows (`heads` heads of HS, `ld` apart) to the whole sequence of this rank's
    // heads/cp heads, [B, full_T_, heads/cp * HS] in full; and back (overwriting x's columns,
    // widened where x is fp32 and full bf16). Each all-to-all moves T. Rank i's row t of
    // sequence b goes to row slot(i, b, t, s) of it.
    template <class T>
    void to_heads(const T* x, int64_t heads, int64_t ld, T* full, const CpAttentionShape& s);
    template <class T, class U>
    void from_heads(const T* full, int64_t heads, U* x, int64_t ld, const CpAttentionShape& s);
    // The all-to-all staging, grown to hold size_ blocks of n values of T.
    template <class T>
    void staging(int64_t n);
    int64_t slot(int i, int64_t b, int64_t t, const CpAttentionShape& s) const {
        const CpDocOrder* o = s.doc_order;
        return o && !o->slots.empty() ? o->slots[size_t((b * size_ + i) * s.T + t)]
                                      : slots_[size_t(i)][size_t(t)];
    }

    CpComm& cp_;
    int rank_, size_;  // in cp_
    kernels::Zigzag z_;
    std::unique_ptr<CpAttention> across_;  // hybrid: the ring across the Ulysses groups
    std::vector<int64_t> positions_;
    // Two key/value blocks (and in backward their dK/dV) in flight, and a block's partial result.
    // Under bf16 the pair's bf16 output too (part16_), widened into part_ for the merge.
    Buffer ring_[2], part_, part_lse_, part16_;
    int64_t ring_floats_ = 0;
    bool ulysses_, bidirectional_;
    // TokenRing: the home keys and values (and in backward their dK/dV), the partial results
    // sent back (two: one in flight while the next is computed), the one received, and this
    // rank's own dQ.
    Buffer home_kv_, returns_[2], returned_, own_dq_;
    // Ulysses: rows per sequence of the whole sequence (hybrid: of the group's two chunks), and
    // where each rank's rows go in it.
    int64_t full_T_ = 0;
    std::vector<std::vector<int64_t>> slots_;
    // Ulysses: the all-to-all's send and receive blocks, and whole-sequence dout, dq, dk, dv
    // for this rank's heads.
    Buffer send_, recv_, dof_, dqf_, dkf_, dvf_;
    // Ulysses: whole-sequence q | k | v | out of this rank's heads from each forward whose
    // backward has not run, by that call's lse (which names its micro-batch and layer); and
    // buffers backward has finished with, for the next forwards.
    std::unordered_map<const float*, Buffer> saved_;
    std::vector<Buffer> spare_;
};

}  // namespace weft::model
