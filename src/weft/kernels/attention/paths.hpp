#pragma once
// The instruction-set paths behind attention.hpp: portable, AVX2 and AVX-512. All take validated
// shapes and run the same tiled algorithm; attention.cpp picks one with kernel_isa(). The AVX2
// and AVX-512 paths are the one template tiled.hpp, over 8-lane and 16-lane vectors
// (avx2.cpp, avx512.cpp).
//
// bf16 attention (attention_forward_bf16 / attention_backward_bf16, bf16.cpp) runs on
// AVX512-BF16 dot products where the CPU has them (avx512_bf16.cpp: the tiling here
// with bf16 operands) and elsewhere widens each sequence to fp32 and runs the path chosen here.
#include <algorithm>
#include <cstdint>

#include "weft/kernels/attention/attention.hpp"

namespace weft::kernels::detail {

// Checks a shape's sizes, strides and positions (attention.hpp's contract), naming `where`.
void check_shape(const AttentionShape& s, const char* where);

// Whether a call has enough work to wake a thread team: tiny calls (a finite-difference test,
// decoding a short prompt) run faster alone than across a barrier on a busy machine.
inline bool worth_threads(const AttentionShape& s) {
    return s.B * s.NH * s.Tq * s.Tk * s.HS > (int64_t(1) << 18);
}

// Keys query row t sees: a prefix of the Tk given, keys 0 .. visible_keys - 1 (possibly none: a
// block of keys entirely after the query). Both paths mask with it and nothing else, so that a
// whole sequence, a KV-cache step and a ring-attention block run the same loops.
inline int64_t visible_keys(const AttentionShape& s, int64_t t) {
    return std::clamp<int64_t>(s.q_pos0 - s.k_pos0 + t + 1, 0, s.Tk);
}

// Key/value heads of a checked shape (NKV = 0 means NH), and query heads per key/value head.
inline int64_t kv_heads(const AttentionShape& s) {
    return s.NKV > 0 ? s.NKV : s.NH;
}
inline int64_t group_size(const AttentionShape& s) {
    return s.NH / kv_heads(s);
}

// How the vector paths' forward splits into work items, and each thread's loop over them. A
// thread copies the K and V rows its queries see into dense scratch once per (batch, key/value
// head) it moves to. Items of one whole (batch, head) copy each head once; items of one block of
// query rows balance the threads more finely but have every thread copy every head (4% of the
// fp32 forward at GPT-2's shape). So: whole heads while they divide evenly among the threads,
// then the other heads' blocks. A head's blocks run late first: those see the most keys, so its
// first copies every row the rest need.
class ForwardPlan {
  public:
    ForwardPlan(const AttentionShape& s, int64_t block);
    int64_t items() const { return whole_ + (heads_ - whole_) * blocks_; }
    bool threads() const { return threads_; }
    // Calls block(b, h, i0) for the query blocks of item `it`, the latest first.
    template <class Block>
    void for_blocks(int64_t it, Block&& block) const {
        int64_t bh = it, lo = 0, hi = blocks_;
        if (it >= whole_) {
            const int64_t r = it - whole_;
            bh = whole_ + r / blocks_;
            lo = blocks_ - 1 - r % blocks_;
            hi = lo + 1;
        }
        for (int64_t blk = hi - 1; blk >= lo; --blk) block(bh / s_.NH, bh % s_.NH, blk * block_);
    }
    // A thread's share of the items (an omp for: call it inside the parallel region): before
    // each block, grow(b, kvh, from, to) copies K/V rows [from, to) of (batch b, key/value head
    // kvh) after the rows already in the thread's copy (from 0 when the head changes), so that
    // it holds every key the block sees; then block(b, h, i0) runs the block.
    template <class Grow, class Block>
    void run_thread(Grow&& grow, Block&& block) const {
        const int64_t NKV = kv_heads(s_), G = group_size(s_);
        int64_t cached = -1, rows = 0;
#pragma omp for schedule(dynamic)
        for (int64_t it = 0; it < items(); ++it)
            for_blocks(it, [&](int64_t b, int64_t h, int64_t i0) {
                const int64_t kvh = h / G;
                const int64_t kend = visible_keys(s_, std::min(s_.Tq, i0 + block_) - 1);
                if (b * NKV + kvh != cached) cached = b * NKV + kvh, rows = 0;
                if (kend > rows) {
                    grow(b, kvh, rows, kend);
                    rows = kend;
                }
                block(b, h, i0);
            });
    }

  private:
    AttentionShape s_;
    int64_t block_, blocks_, heads_, whole_;
    bool threads_;
};

// Where one query head's backward adds its dK and dV: row t of the head at dk + t*ld (dv alike).
struct KvGrad {
    float* dk;
    float* dv;
    int64_t ld;
};

// How backward splits into work items. The G query heads of a key/value head all add into its dK
// and dV rows, so two threads may run heads of one group at once only if each writes rows of its
// own:
//   shared   an item is one (batch, key/value head) running its G query heads in order, adding
//            into dk and dv directly (with G = 1, one item a head);
//   private  an item is one (batch, query head) writing dK and dV into zeroed partials; finish()
//            then adds them into dk and dv in head order.
// Either way every row of dk receives the heads' contributions one by one in head order, so the
// results are bit-identical and independent of the thread count; private is chosen only when its
// G times more items finish sooner on the threads there are, since it costs 2·B·NH·Tk·HS floats
// of scratch and one more pass over them.
class BackwardPlan {
  public:
    BackwardPlan(float* dk, float* dv, const AttentionShape& s);
    int64_t items() const { return items_; }
    bool threads() const { return threads_; }
    // Item `it` runs the query heads b*NH + h = it*heads_per_item() + j, j < heads_per_item(), in
    // that order.
    int64_t heads_per_item() const { return per_item_; }
    // Where query head h of batch b adds its gradients (private rows are zeroed here, by the
    // thread that will fill them).
    KvGrad kv_grad(int64_t b, int64_t h) const;
    // Adds the private partials into dk and dv (nothing to do for shared items).
    void finish() const;
    // The whole backward over the plan's items, on the threads it chose, then finish(): each
    // thread makes its scratch once (make_scratch()), then runs head(scratch, b, h, kv_grad(b, h))
    // for the query heads of each item it takes, in order. An item owns its query heads, so
    // their dQ rows are written by no one else.
    template <class MakeScratch, class Head>
    void run(MakeScratch&& make_scratch, Head&& head) const {
#pragma omp parallel if (threads_)
        {
            auto scratch = make_scratch();
#pragma omp for schedule(dynamic)
            for (int64_t it = 0; it < items_; ++it)
                for (int64_t j = 0; j < per_item_; ++j) {
                    const int64_t bh = it * per_item_ + j, b = bh / s_.NH, h = bh % s_.NH;
                    head(scratch, b, h, kv_grad(b, h));
                }
        }
        finish();
    }

  private:
    AttentionShape s_;
    float* dk_;
    float* dv_;
    int64_t G_, per_item_, items_;
    bool threads_;
    float* partials_ = nullptr;  // private: [2][B*NH][Tk][HS], dK then dV
};

void attention_forward_portable(float* out, float* lse, const float* q, const float* k,
                                const float* v, const AttentionShape& s);
void attention_backward_portable(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out, const float* lse,
                                 const AttentionShape& s);

#if defined(__AVX512F__)
void attention_forward_avx512(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s);
void attention_backward_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s);
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
void attention_forward_bf16_avx512(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, const AttentionShape& s);
void attention_backward_bf16_avx512(float* dq, float* dk, float* dv, const uint16_t* dout,
                                    const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const uint16_t* out, const float* lse, const AttentionShape& s);
// The 4-byte words of scratch a thread running both on shape s holds.
int64_t attention_bf16_avx512_scratch_words(const AttentionShape& s);
#endif

#if defined(__AVX2__) && defined(__FMA__)
void attention_forward_avx2(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& s);
void attention_backward_avx2(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const AttentionShape& s);
#endif

}  // namespace weft::kernels::detail
