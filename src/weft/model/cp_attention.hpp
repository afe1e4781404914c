#pragma once
// Ring attention over a context-parallel group (Liu et al.'s ring attention, zigzag-balanced):
// the region a model calls in place of its local causal attention when each sequence is split
// over cp ranks. No MPI here: the ring shifts are the CpComm's.
//
// Each rank holds, per sequence, its two zigzag chunks (kernels/attention_zigzag.hpp) as T/cp
// consecutive rows: part 0 then part 1. Forward: the key/value block (kv heads only, so GQA
// moves NKV/NH of the query width) rotates cp - 1 times around the ring, the next block's
// transfer started before the current block's attention (double-buffered); each visible
// (query part, key part) pair is one kernel call merged into a running (out, lse). Backward:
// the blocks rotate again; each block's dK/dV accumulator travels with it and arrives home after
// cp shifts, while dQ accumulates here. docs/context_parallel.md counts the bytes.
#include <cstdint>

#include "weft/core/buffer.hpp"
#include "weft/kernels/attention_zigzag.hpp"
#include "weft/model/cp_comm.hpp"

namespace weft::model {

// Where one micro-batch's attention inputs live: rows of B sequences of T (local) positions,
// q, k, v and out `ldq`, `ldkv`, `ldo` floats apart (k and v may be views into a fused qkv).
struct CpAttentionShape {
    int64_t B, T, NH, NKV, HS;
    int64_t ldq, ldkv, ldo;
};

class CpAttention {
  public:
    // `cp` must outlive this object; T_global is the whole sequence length.
    CpAttention(CpComm& cp, int64_t T_global);

    int rank() const { return rank_; }
    int size() const { return size_; }
    const kernels::Zigzag& zigzag() const { return z_; }

    // out (ldo rows) and lse ([B][2][NH][chunk]: per sequence and part, the kernel's layout)
    // of causal attention over the whole sequence for this rank's queries.
    void forward(float* out, float* lse, const float* q, const float* k, const float* v,
                 const CpAttentionShape& s);
    // dq, dk, dv (same addressing as q, k, v) are overwritten.
    void backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                  const float* k, const float* v, const float* out, const float* lse,
                  const CpAttentionShape& s);

  private:
    void ensure(int64_t floats);

    CpComm& cp_;
    int rank_, size_;
    kernels::Zigzag z_;
    // Two key/value blocks (and in backward their dK/dV) in flight, and a block's partial result.
    Buffer ring_[2], part_, part_lse_;
    int64_t ring_floats_ = 0;
};

}  // namespace weft::model
