#pragma once
// A block's weight gradients held back to run later: the W of the zero-bubble pipeline schedules
// (Qi et al. 2024), which split a backward into B (the gradient of the block's input, which the
// previous stage waits for) and W (the gradients of its weights, which nothing waits for).
//
// While a DeferWeightGrads scope lives on a thread, the products of a block's backward
// (kept_tensor.hpp's backward_kept and its bf16 forms) compute only their input's gradient and
// queue the rest with a copy of their output's gradient; WeightGradQueue::run() then computes
// the queued gradients with the same kernels on the same operands, in the order queued. The
// kernels compute a product's input and weight gradients independently, so B then W gives the
// fused backward's gradients bit for bit. The input a W reads is the one the layer kept in its
// Activations, which must stay as they are until the W (no recomputation in between).
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/kept_tensor.hpp"

namespace weft::model {

class WeightGradQueue {
  public:
    // A queue for weights that never step (a frozen model's B, PPD's prompt tokens): every W is
    // dropped as it is deferred, so no output gradient is copied or kept for it.
    enum Mode { queue, discard };
    explicit WeightGradQueue(Mode mode = queue) : discard_(mode == discard) {}
    bool empty() const { return tasks_.empty(); }
    // dw [N,K] += doutᵀ · input, db [N] += Σ dout (db may be null), input [M,K] kept at `at`.
    void defer(float* dw, float* db, const float* dout, const KeptTensor& kept, int64_t at,
               int64_t M, int64_t K, int64_t N);
    // The same with dout already rounded to bf16 (kernels::matmul_backward_bf16_dout; no bias).
    void defer_bf16_dout(float* dw, const uint16_t* dout, const KeptTensor& kept, int64_t at,
                         int64_t M, int64_t K, int64_t N);
    // A block whose products are not backward_kept's (the MoE layer's grouped experts, its
    // router and shared experts) queues its W itself: `keep` copies what its backward leaves in
    // scratch (the copy lives until run() returns) and `defer_call` queues `w`, run in order with
    // the products' W's. `w` reads those copies and the block's kept inputs.
    const float* keep(const float* src, int64_t floats);
    void defer_call(std::function<void()> w);
    // Runs the queued gradients in order, and empties the queue (keeping its buffers).
    void run();
    // Floats the copies of output gradients hold (the memory W costs until it runs), and with
    // the buffers kept for reuse.
    int64_t floats() const;
    int64_t allocated_floats() const;

  private:
    struct Task {
        float *dw, *db;
        const KeptTensor* kept;  // null: a copy for a call (keep), or the call
        int64_t at, M, K, N;
        bool bf16_dout;
        Buffer dout;  // fp32 [M,N], or bf16 [M,N] in (M*N + 1) / 2 floats; or keep's copy
        std::function<void()> call;
    };
    // A buffer of at least `floats` for a copy: a spare one if one fits, else a new one.
    Buffer take(int64_t floats);

    bool discard_;
    std::vector<Task> tasks_;
    std::vector<Task> spare_;  // run tasks, smallest first, whose buffers the next defers reuse
};

// Makes the block backwards on this thread queue their weight gradients into `q`, while it lives.
class DeferWeightGrads {
  public:
    explicit DeferWeightGrads(WeightGradQueue& q);
    ~DeferWeightGrads();
    DeferWeightGrads(const DeferWeightGrads&) = delete;
    DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;
    // The queue of the innermost scope on this thread, or null.
    static WeightGradQueue* current();

  private:
    WeightGradQueue* saved_;
};

}  // namespace weft::model
