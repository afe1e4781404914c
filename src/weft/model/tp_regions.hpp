#pragma once
// The tensor-parallel regions every model family is built from, written once (as Megatron-LM's
// mappings.py and ColumnParallelLinear / RowParallelLinear are): the column-parallel input
// (f: identity forward, all-reduce backward; under sequence parallelism g: all-gather forward,
// reduce-scatter backward), the row-parallel output (all-reduce; under sequence parallelism a
// reduce-scatter), the replicated tensors' gradients under sequence parallelism, and the
// vocabulary-parallel embedding and fused loss. At tp = 1 each is what one process does.
// docs/tensor_parallel.md names the operations and counts their bytes. No MPI here: the
// collectives are the TpComm's.
#include <cstdint>

#include "weft/core/buffer.hpp"
#include "weft/kernels/distill_rows.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/model/row_products.hpp"
#include "weft/model/tp_comm.hpp"

namespace weft::model {

class TpRegions {
  public:
    // `tp`: the group (null at tp = 1); `width`: the residual stream's width C. `vocab`: the real
    // vocabulary, `padded_vocab` the embedding's rows (a multiple of tp).
    TpRegions(TpComm* tp, int rank, bool sequence_parallel, int64_t width, int64_t vocab,
              int64_t padded_vocab);

    int size() const { return size_; }
    int rank() const { return rank_; }
    bool sp() const { return sp_; }

    // This rank's rows of a [B*T, C] buffer (all of them unless sequence parallel).
    float* own_rows(float* full, int64_t rows) const;
    // Sequence parallel: every rank's `rows` rows of `full`, in place (g's forward, before a
    // column-parallel product).
    void gather_rows(float* full, int64_t rows);
    // out[rows, C] = (in[BT, K] · w[C, K]ᵀ summed over the ranks) + b + resid: a row-parallel
    // product and the residual connection (all-reduce; sequence parallel: reduce-scatter to this
    // rank's rows, through `partial`, [BT, C] of scratch). b may be null.
    void row_parallel_forward(float* out, const float* in, const float* w, const float* b,
                              const float* resid, int64_t BT, int64_t K, int64_t rows,
                              float* partial);
    // The same with `in` stored as bf16 (a bf16 activation, model::LayerSpan::bf16).
    void row_parallel_forward(float* out, const uint16_t* in, const float* w, const float* b,
                              const float* resid, int64_t BT, int64_t K, int64_t rows,
                              float* partial);
    // The gradient of a row-parallel region's output for all B*T rows: dres itself, or under
    // sequence parallelism every rank's rows gathered into `full` ([BT, C] scratch).
    const float* gather_grad(const float* dres, int64_t rows, float* full);
    // A column-parallel region's partial input gradient `partial` [BT, C] summed over the ranks
    // (f's backward: all-reduce in place; sequence parallel: reduce-scattered into `out_rows`).
    const float* sum_input_grad(float* partial, int64_t BT, int64_t rows, float* out_rows);
    // Sequence parallel: adds `partial` [count * C], this micro-batch's gradients of replicated
    // tensors from this rank's rows only, summed over the ranks, into dst[i] (C floats each).
    // Only this micro-batch's share is summed: the gradient buffers accumulate over
    // micro-batches, and summing them would count the earlier ones tp times.
    void add_replicated_grads(float* partial, float* const* dst, int count);

    // Vocabulary-parallel embedding into out[rows, C] (this rank's rows): each rank looks up the
    // tokens of its slice of wte (zero for others), plus wpe (may be null) once, and the ranks'
    // parts are summed (reduce-scattered under sequence parallelism, through `partial`).
    void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                           int64_t B, int64_t T, int64_t pos0, float* partial);
    // Its backward from dres [rows, C]: dwte's slice and dwpe (may be null) accumulated, from
    // every row's gradient (gathered into `full` under sequence parallelism).
    void embedding_backward(float* dwte, float* dwpe, const float* dres, const int32_t* tokens,
                            int64_t B, int64_t T, float* full);
    // The fused head and loss on x [BT, C] (every row, gathered): losses[BT]; with `train` the
    // gradient of x for this rank's rows into dx [rows, C] (through `partial` [BT, C] under
    // sequence parallelism) and w's gradient shard accumulated into dw. Logits exist one chunk
    // of rows at a time; with tp > 1 over this rank's slice of the vocabulary. `soft`: a
    // teacher's logits to distill from, with `train` only, at tp 1 only.
    void head(float* losses, float* dx, float* dw, const float* x, const float* w,
              const int32_t* targets, int64_t BT, int64_t rows, bool train, float scale,
              float* partial, const kernels::SoftTargets* soft = nullptr);
    // Floats of the head's logits scratch at tp > 1 (kernels::classifier_shard_scratch_floats).
    static int64_t head_scratch_floats(int64_t BT, int64_t vocab_shard);

    // Serving and generation (Model::forward_rows, never sequence parallel): the same three
    // regions over `rows` rows that every rank holds whole, their products through `mm`. The
    // sums over the ranks are fp32 whatever the products' dtype; the column-parallel products
    // and the vocabulary slices are the bits of one process, only a row-parallel sum is added
    // in another order than one process's product adds it (docs/serving.md).
    // out[rows, C] = wte[tokens]: each rank's slice looked up (zero rows for the others), summed.
    void embed_rows(float* out, const int32_t* tokens, const float* wte, int64_t rows);
    // out[rows, C] = in[rows, K] · w[C, K]ᵀ summed over the ranks, + b (may be null).
    void row_parallel_rows(float* out, const float* in, const float* w, const float* b,
                           int64_t rows, int64_t K, RowProducts& mm);
    // logits[rows, vocab] = x[rows, C] · w[vocab, C]ᵀ: each rank's slice of the head, gathered.
    void head_rows(float* logits, const float* x, const float* w, int64_t rows, RowProducts& mm);
    // The same for x's rows, the logit rows of `b`: the rows that only propose tokens
    // (RowBatch::proposes) over the batch's shortlist (at tp 1 only), the others over the whole
    // vocabulary with the bits of head_rows (its products are row-invariant).
    void head_rows(float* logits, const float* x, const float* w, const RowBatch& b,
                   RowProducts& mm);

  private:
    template <typename In>
    void row_parallel(float* out, const In* in, const float* w, const float* b, const float* resid,
                      int64_t BT, int64_t K, int64_t rows, float* partial);

    TpComm* tp_;
    int size_ = 1, rank_ = 0;
    bool sp_ = false;
    int64_t C_;
    // This rank's slice of the padded vocabulary starts at v0_ and has vs_ rows, vr_ of them real.
    int64_t vocab_, v0_ = 0, vs_ = 0, vr_ = 0;
    Buffer head_logits_, head_stats_;  // tp > 1: one chunk of logits, its row maxima and sums
};

}  // namespace weft::model
