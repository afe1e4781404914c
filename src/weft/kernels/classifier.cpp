#include "weft/kernels/classifier.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "weft/core/error.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/softmax_rows.hpp"

namespace weft::kernels {

namespace {

// Rows per chunk. The dwte update is a GEMM with inner dimension = chunk rows, and it only runs
// near peak once that is several hundred (bench_matmul measures it); 1024 rows of GPT-2 logits
// are 206 MB, which a 124M-parameter run can afford.
constexpr int64_t kMaxChunkRows = 1024;

// One row of logits: its maximum, Σexp(x - max) and loss; with `keep` the row keeps its
// exponentials.
struct RowSoftmax {
    float max, sum, loss;
};
RowSoftmax row_softmax(const detail::SoftmaxRowOps& ops, float* row, int64_t V, int32_t target,
                       bool keep) {
    const float max = ops.max(row, V);
    const float target_logit = row[target];  // read before the exponentials overwrite it
    const float sum = ops.exp_sum(row, V, max, keep);
    return {max, sum, std::log(sum) + max - target_logit};
}

// The logits block is kept between calls: allocating 200 MB per call would page-fault it in
// again each step. Calls are serialised on it (the kernel uses every core anyway).
struct Scratch {
    std::mutex mutex;
    std::unique_ptr<float[]> data;
    int64_t size = 0;
};

Scratch& scratch() {
    static Scratch s;
    return s;
}

// The losses of r rows of logits (row-major, V wide) and, with `grad`, their gradient
// scale·(softmax - onehot) in place. A row whose target is negative has no loss and no gradient.
void fp32_rows(float* logits, float* loss, const int32_t* targets, int64_t r, int64_t V,
               float scale, bool grad, const detail::SoftmaxRowOps& ops) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < r; ++i) {
        float* row = logits + i * V;
        const int32_t t = targets[i];
        float l = 0.0f;
        if (t >= 0) {
            const RowSoftmax sm = row_softmax(ops, row, V, t, grad);
            l = sm.loss;
            if (grad) {
                ops.scale(row, V, scale / sm.sum);
                row[t] -= scale;
            }
        } else if (grad) {
            std::memset(row, 0, size_t(V) * sizeof(float));
        }
        if (loss) loss[i] = l;
    }
}

// The same losses, and the gradient rounded to bf16 into grad16 transposed ([V, r]), blocks of
// kTransposedRows rows at a time; the logits are left as they are.
void bf16_grad_rows(uint16_t* grad16, float* logits, float* loss, const int32_t* targets, int64_t r,
                    int64_t V, float scale, const detail::SoftmaxRowOps& ops) {
    constexpr int64_t kBlock = detail::kTransposedRows;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < r; i0 += kBlock) {
        const int64_t n = std::min(kBlock, r - i0);
        detail::GradRow rows[kBlock];
        for (int64_t i = 0; i < n; ++i) {
            float* row = logits + (i0 + i) * V;
            const int32_t t = targets[i0 + i];
            float l = 0.0f;
            if (t >= 0) {
                const RowSoftmax sm = row_softmax(ops, row, V, t, false);
                rows[i] = {row, sm.max, scale / sm.sum, t};
                l = sm.loss;
            }
            if (loss) loss[i0 + i] = l;
        }
        ops.grad_bf16_transposed(grad16 + i0, r, rows, n, scale, V);
    }
}

}  // namespace

int64_t classifier_chunk_rows(int64_t N) {
    if (N <= 0) return 0;
    // Equal chunks: a short last chunk would make a poor dwte GEMM.
    int64_t chunks = (N + kMaxChunkRows - 1) / kMaxChunkRows;
    return (N + chunks - 1) / chunks;
}

int64_t classifier_scratch_floats(int64_t N, int64_t V) {
    return classifier_chunk_rows(N) * V;
}

void classifier_forward_backward(float* loss, float* dx, float* dwte, const float* x,
                                 const float* wte, const int32_t* targets, int64_t N, int64_t C,
                                 int64_t V, float scale, const SoftTargets* soft) {
    WEFT_PROFILE("classifier");
    WEFT_CHECK(N >= 0 && C > 0 && V > 0, "classifier_forward_backward: bad sizes N={} C={} V={}", N,
               C, V);
    for (int64_t n = 0; n < N; ++n)
        WEFT_CHECK(targets[n] < V, "classifier_forward_backward: target {} of row {} is not < V={}",
                   targets[n], n, V);
    if (N == 0) return;
    const bool grad = dx != nullptr || dwte != nullptr;
    const int64_t R = classifier_chunk_rows(N);
    Scratch& s = scratch();
    std::lock_guard lock(s.mutex);
    if (s.size < R * V) {
        s.data.reset();  // release the old block before taking the larger one
        s.data.reset(new float[size_t(R * V)]);
        s.size = R * V;
    }
    float* logits = s.data.get();
    const detail::SoftmaxRowOps ops = detail::softmax_row_ops();
    // With bf16 products, the table is rounded (and packed, once for the logits' layout and once
    // for dx's) once per call instead of twice per chunk, and each chunk's logits once for dx and
    // dwte (the largest operands of a step: GPT-2's table is 38.6M values, a chunk of logits
    // 51.5M). The chunk's input is pinned too: packed as dwte's B, it saves oneDNN repacking it
    // for every block of the 50257 rows (bench_matmul: 561 -> 683 GFLOP/s).
    // model/bf16_scratch.cpp counts these copies; keep the two in step.
    const Bf16OperandScope pin_table(wte, V, C, C);

    for (int64_t n0 = 0; n0 < N; n0 += R) {
        const int64_t r = std::min(R, N - n0);
        const float* xc = x + n0 * C;
        const Bf16OperandScope pin_x(xc, r, C, C);
        gemm(false, true, r, V, C, 1.0f, xc, C, wte, C, 0.0f, logits, V);
        // With bf16 products the gradient is only read rounded, by dx and dwte: the row loop
        // writes it so, into the scope's copy, and never in fp32 (one pass over 206 MB of fp32
        // less per chunk). It writes it transposed, [V, r]: dwte then multiplies a plain A, which
        // oneDNN runs at 830-900 GFLOP/s where it ran the transposed one at 710-740, and dx a
        // transposed one at 2% below the plain (bench_matmul, classifier_gemm_bf16, Zen 5).
        std::optional<Bf16OperandScope> pin_grad;
        if (grad && !soft) pin_grad.emplace(logits, V, r, r, Bf16OperandScope::CallerRounds{});
        uint16_t* grad16 = pin_grad ? pin_grad->copy() : nullptr;
        if (grad16)
            bf16_grad_rows(grad16, logits, loss ? loss + n0 : nullptr, targets + n0, r, V, scale,
                           ops);
        else if (soft)
            distill_rows(logits, loss ? loss + n0 : nullptr, targets + n0, soft->logits + n0 * V, r,
                         V, scale, grad, soft->weight, soft->temperature);
        else
            fp32_rows(logits, loss ? loss + n0 : nullptr, targets + n0, r, V, scale, grad, ops);
        if (grad16) {
            if (dx) gemm(true, false, r, C, V, 1.0f, logits, r, wte, C, 0.0f, dx + n0 * C, C);
            if (dwte) gemm(false, false, V, C, r, 1.0f, logits, r, xc, C, 1.0f, dwte, C);
        } else {
            if (dx) gemm(false, false, r, C, V, 1.0f, logits, V, wte, C, 0.0f, dx + n0 * C, C);
            if (dwte) gemm(true, false, V, C, r, 1.0f, logits, V, xc, C, 1.0f, dwte, C);
        }
    }
}

void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C,
                       int64_t V) {
    WEFT_CHECK(N >= 0 && C > 0 && V > 0, "classifier_logits: bad sizes N={} C={} V={}", N, C, V);
    gemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, logits, V);
}

}  // namespace weft::kernels
