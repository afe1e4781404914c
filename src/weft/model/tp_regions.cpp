#include "weft/model/tp_regions.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/classifier_parallel.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::model {

namespace k = weft::kernels;

TpRegions::TpRegions(TpComm* tp, int rank, bool sequence_parallel, int64_t width, int64_t vocab,
                     int64_t padded_vocab)
    : tp_(tp), size_(tp ? tp->size() : 1), rank_(rank), C_(width), vocab_(vocab) {
    WEFT_CHECK(!tp || tp->rank() == rank,
               "internal: tensor-parallel rank {} on a group where this is rank {}", rank,
               tp ? tp->rank() : 0);
    sp_ = sequence_parallel && size_ > 1;
    vs_ = padded_vocab / size_;
    v0_ = int64_t(rank_) * vs_;
    vr_ = std::clamp<int64_t>(vocab - v0_, 0, vs_);
}

float* TpRegions::own_rows(float* full, int64_t rows) const {
    return sp_ ? full + int64_t(rank_) * rows * C_ : full;
}

void TpRegions::gather_rows(float* full, int64_t rows) {
    if (!sp_) return;
    const int64_t n = rows * C_;
    tp_->all_gather(full + int64_t(rank_) * n, full, n);
}

namespace {
void product(float* out, const float* in, const float* w, const float* b, int64_t M, int64_t K,
             int64_t N) {
    k::matmul_forward(out, in, w, b, M, K, N);
}
void product(float* out, const uint16_t* in, const float* w, const float* b, int64_t M, int64_t K,
             int64_t N) {
    k::matmul_forward_bf16_input(out, in, w, b, M, K, N);
}
}  // namespace

void TpRegions::row_parallel_forward(float* out, const float* in, const float* w, const float* b,
                                     const float* resid, int64_t BT, int64_t K, int64_t rows,
                                     float* partial) {
    row_parallel(out, in, w, b, resid, BT, K, rows, partial);
}

void TpRegions::row_parallel_forward(float* out, const uint16_t* in, const float* w, const float* b,
                                     const float* resid, int64_t BT, int64_t K, int64_t rows,
                                     float* partial) {
    row_parallel(out, in, w, b, resid, BT, K, rows, partial);
}

template <typename In>
void TpRegions::row_parallel(float* out, const In* in, const float* w, const float* b,
                             const float* resid, int64_t BT, int64_t K, int64_t rows,
                             float* partial) {
    if (size_ == 1) {
        product(out, in, w, b, BT, K, C_);
        k::add_inplace(out, resid, BT * C_);
        return;
    }
    // Each rank's product covers its slice of K, a partial sum; the bias belongs to the sum.
    if (sp_) {
        product(partial, in, w, nullptr, BT, K, C_);
        tp_->reduce_scatter_sum(partial, out, rows * C_);
    } else {
        product(out, in, w, nullptr, BT, K, C_);
        tp_->all_reduce_sum(out, BT * C_);
    }
    if (b)
        k::add_bias_residual(out, b, resid, rows, C_);
    else
        k::add_inplace(out, resid, rows * C_);
}

const float* TpRegions::gather_grad(const float* dres, int64_t rows, float* full) {
    if (!sp_) return dres;
    tp_->all_gather(dres, full, rows * C_);
    return full;
}

const float* TpRegions::sum_input_grad(float* partial, int64_t BT, int64_t rows, float* out_rows) {
    if (size_ == 1) return partial;
    if (!sp_) {
        tp_->all_reduce_sum(partial, BT * C_);
        return partial;
    }
    tp_->reduce_scatter_sum(partial, out_rows, rows * C_);
    return out_rows;
}

void TpRegions::add_replicated_grads(float* partial, float* const* dst, int count) {
    tp_->all_reduce_sum_exact(partial, count * C_);
    for (int i = 0; i < count; ++i) k::add_inplace(dst[i], partial + i * C_, C_);
}

void TpRegions::embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                  const float* wpe, int64_t B, int64_t T, int64_t pos0,
                                  float* partial) {
    if (size_ == 1) {
        if (wpe)
            k::embedding_forward(out, tokens, wte, wpe, B, T, C_, pos0);
        else
            k::embedding_forward_shard(out, tokens, wte, nullptr, B, T, C_, 0, vs_, pos0);
        return;
    }
    // Each rank looks up the tokens of its slice of the vocabulary (zero rows for the others),
    // so the sum over the ranks is the whole lookup; wpe, given on rank 0 only, is in it once.
    float* sum = sp_ ? partial : out;
    k::embedding_forward_shard(sum, tokens, wte, rank_ == 0 ? wpe : nullptr, B, T, C_, v0_, vs_,
                               pos0);
    if (sp_)
        tp_->reduce_scatter_sum(sum, out, B * T / size_ * C_);
    else
        tp_->all_reduce_sum(sum, B * T * C_);
}

void TpRegions::embedding_backward(float* dwte, float* dwpe, const float* dres,
                                   const int32_t* tokens, int64_t B, int64_t T, float* full) {
    if (size_ == 1) {
        if (dwpe)
            k::embedding_backward(dwte, dwpe, dres, tokens, B, T, C_);
        else
            k::embedding_backward_shard(dwte, dres, tokens, B, T, C_, 0, vs_);
        return;
    }
    // Every row's gradient: a rank's slice of the vocabulary may appear in any of them, and with
    // it each rank has the whole gradient of the replicated wpe.
    const float* dout = gather_grad(dres, sp_ ? B * T / size_ : B * T, full);
    k::embedding_backward_shard(dwte, dout, tokens, B, T, C_, v0_, vs_);
    if (dwpe) k::embedding_backward(nullptr, dwpe, dout, tokens, B, T, C_);
}

void TpRegions::head(float* losses, float* dx, float* dw, const float* x, const float* w,
                     const int32_t* targets, int64_t BT, int64_t rows, bool train, float scale,
                     float* partial, const kernels::SoftTargets* soft) {
    const bool distill = train && soft && soft->logits;
    if (size_ == 1) {
        k::classifier_forward_backward(losses, train ? dx : nullptr, train ? dw : nullptr, x, w,
                                       targets, BT, C_, vocab_, scale, distill ? soft : nullptr);
        return;
    }
    WEFT_CHECK(!distill, "internal: distillation under tensor parallelism");
    for (int64_t n = 0; n < BT; ++n)
        WEFT_CHECK(targets[n] < vocab_, "target {} of row {} is not < vocab size {}", targets[n], n,
                   vocab_);
    const int64_t chunk = k::classifier_chunk_rows(BT);
    // At least one float: a shard of padding rows only (vr_ = 0) still gets a pointer.
    const int64_t logits_floats = std::max<int64_t>(1, chunk * vr_);
    if (head_logits_.size() < logits_floats) head_logits_ = Buffer(logits_floats);
    if (head_stats_.size() < 3 * chunk) head_stats_ = Buffer(3 * chunk);
    // The partial gradient of every row of x: in place under plain tensor parallelism,
    // reduce-scattered to this rank's rows from `partial` under sequence parallelism.
    float* dxp = !train ? nullptr : sp_ ? partial : dx;
    float* logits = head_logits_.data();
    for (int64_t n0 = 0; n0 < BT; n0 += chunk) {
        const int64_t r = std::min(chunk, BT - n0);
        float* max = head_stats_.data();
        float* sums = max + r;  // [2r]: softmax denominators, then target logits
        const float* xs = x + n0 * C_;
        const int32_t* t = targets + n0;
        k::classifier_shard_logits(logits, max, xs, w, r, C_, vr_);
        tp_->all_reduce_max(max, r);
        k::classifier_shard_sums(sums, logits, max, t, r, vr_, v0_, train);
        tp_->all_reduce_sum_exact(sums, 2 * r);
        k::classifier_shard_finish(losses + n0, dxp ? dxp + n0 * C_ : nullptr, train ? dw : nullptr,
                                   logits, max, sums, xs, w, t, r, C_, vr_, v0_, scale);
    }
    if (!train) return;
    // f's backward (sequence parallel: g's): every rank fed the same x to its vocabulary slice.
    if (sp_)
        tp_->reduce_scatter_sum(partial, dx, rows * C_);
    else
        tp_->all_reduce_sum(dx, BT * C_);
}

int64_t TpRegions::head_scratch_floats(int64_t BT, int64_t vocab_shard) {
    return k::classifier_shard_scratch_floats(BT, vocab_shard);
}

void TpRegions::embed_rows(float* out, const int32_t* tokens, const float* wte, int64_t rows) {
    k::embedding_forward_shard(out, tokens, wte, nullptr, 1, rows, C_, v0_, vs_);
    // A sum of one row and zeros: the bits of the row itself.
    if (size_ > 1) tp_->all_reduce_sum_exact(out, rows * C_);
}

void TpRegions::row_parallel_rows(float* out, const float* in, const float* w, const float* b,
                                  int64_t rows, int64_t K, RowProducts& mm) {
    // The bias after the sum, as the product would add it to its own sum (the same bits at tp 1).
    mm(out, in, w, nullptr, rows, K, C_);
    if (size_ > 1) tp_->all_reduce_sum_exact(out, rows * C_);
    if (!b) return;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < C_; ++j) out[r * C_ + j] += b[j];
}

void TpRegions::head_rows(float* logits, const float* x, const float* w, int64_t rows,
                          RowProducts& mm) {
    if (size_ == 1) return mm(logits, x, w, nullptr, rows, C_, vocab_);
    Buffer shard(rows * vs_), all(size_ * rows * vs_);
    mm(shard.data(), x, w, nullptr, rows, C_, vs_);
    tp_->all_gather(shard.data(), all.data(), rows * vs_);
    // Rank q's block holds ids q * vs_ .. of every row; the padding past the vocabulary is left.
    for (int q = 0; q < size_; ++q) {
        const int64_t v0 = int64_t(q) * vs_, real = std::clamp<int64_t>(vocab_ - v0, 0, vs_);
        for (int64_t r = 0; r < rows; ++r)
            std::copy_n(all.data() + (int64_t(q) * rows + r) * vs_, real, logits + r * vocab_ + v0);
    }
}

void TpRegions::head_rows(float* logits, const float* x, const float* w, const RowBatch& b,
                          RowProducts& mm) {
    const int64_t n = int64_t(b.logit_rows.size());
    std::vector<int64_t> full, part;
    for (int64_t i = 0; i < n; ++i) (b.proposes(size_t(i), vocab_) ? part : full).push_back(i);
    if (part.empty()) return head_rows(logits, x, w, n, mm);
    WEFT_CHECK(size_ == 1, "internal: a vocabulary shortlist under tensor parallelism");
    const VocabShortlist& s = *b.shortlist;
    const int64_t S = int64_t(s.ids().size());
    Buffer xs(n * C_), out(n * std::max(vocab_, S));
    // x's rows `rows` through the head `h` of N ids, each result handed to `put`.
    auto run = [&](const std::vector<int64_t>& rows, const float* h, int64_t N, auto put) {
        if (rows.empty()) return;
        for (size_t r = 0; r < rows.size(); ++r)
            std::copy_n(x + rows[r] * C_, C_, xs.data() + int64_t(r) * C_);
        mm(out.data(), xs.data(), h, nullptr, int64_t(rows.size()), C_, N);
        for (size_t r = 0; r < rows.size(); ++r)
            put(logits + rows[r] * vocab_, out.data() + int64_t(r) * N);
    };
    run(full, w, vocab_, [&](float* to, const float* from) { std::copy_n(from, vocab_, to); });
    run(part, s.head(w, C_), S, [&](float* to, const float* from) { s.scatter(to, from); });
}

}  // namespace weft::model
