#pragma once
// The optimizer interface every optimizer of registry.hpp implements, over a range of the flat
// parameter buffer (the whole buffer in one process, this rank's shard under ZeRO); AdamW, the
// default; the learning-rate schedule and global-norm clipping.
//
// An optimizer keeps its state as flat byte buffers (state(k)) and can step any sub-range
// [a, b) of its range with those buffers given as pointers positioned at state_offset(k, a):
// whoever holds the state elsewhere (a file streamed group by group) steps it without copying
// the whole. Checkpoints see the state as fp32 moments (read_moment / write_moment), whatever
// the optimizer stores, so that they shard and reshard as parameters do (docs/memory.md).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/params.hpp"

namespace weft::optim {

struct OptimConfig {
    std::string optimizer = "adamw";  // a name of registry.hpp
    float lr = 6e-4f;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
    float grad_clip = 1.0f;              // global-norm clip; 0 disables
    std::string lr_schedule = "cosine";  // cosine | constant
    int64_t warmup = 0;                  // linear warm-up steps
    float min_lr_ratio = 0.1f;           // cosine decays to lr * min_lr_ratio at the last step
    float mezo_eps = 1e-3f;              // MeZO's perturbation scale
    uint64_t seed = 0;                   // MeZO's perturbations are drawn from it, step by step

    void validate() const;
};

// Learning rate of optimizer step `step` (0-based) of `total` steps: linear warm-up from lr/warmup
// to lr over `warmup` steps, then constant or cosine down to lr * min_lr_ratio.
float learning_rate(const OptimConfig& c, int64_t step, int64_t total);

// The factor that scales gradients so that their global norm is at most grad_clip.
float clip_scale(const OptimConfig& c, double grad_norm);

struct StepArgs {
    const OptimConfig& c;
    float lr;
    float grad_scale = 1.0f;  // multiplies every gradient first (clipping)
    int64_t t = 1;            // 1-based step
    // Zeroth-order optimizers: the step's projected gradient (L+ - L-) / (2 eps).
    double projected_grad = 0;
};

class Optimizer {
  public:
    // Over the flat-buffer range [begin, end) of `layout`, which must outlive it. The state is
    // allocated by allocate(), so that its size can be counted for any model without it.
    Optimizer(const model::ParamLayout& layout, int64_t begin, int64_t end);
    virtual ~Optimizer();
    Optimizer(Optimizer&&) = default;

    int64_t begin() const { return begin_; }
    int64_t end() const { return end_; }
    int64_t size() const { return end_ - begin_; }

    // The state buffers and their sizes in bytes; allocate() zero-fills them.
    int states() const { return int(state_bytes_.size()); }
    int64_t state_bytes(int k) const { return state_bytes_[size_t(k)]; }
    int64_t state_bytes() const;
    void allocate();
    std::byte* state(int k) { return reinterpret_cast<std::byte*>(state_[size_t(k)].data()); }
    // Where element `a` (relative to begin()) starts in state buffer k; a must be a boundary
    // (align_down(a) == a, or size()).
    virtual int64_t state_offset(int /*k*/, int64_t a) const { return 4 * a; }
    // The largest boundary at or below `a` at which a sub-range may start or end.
    virtual int64_t align_down(int64_t a) const { return a; }
    // State buffer k's name (--offload's files): the moments' as checkpoints name them.
    virtual std::string state_name(int k) const {
        return k == 0 ? "exp_avg" : k == 1 ? "exp_avg_sq" : "state" + std::to_string(k);
    }

    // Steps elements [a, b) (boundaries, relative to begin()): params and grads point at
    // element begin() of their flat buffers (grads null for an optimizer without gradients),
    // states[k] at byte state_offset(k, a) of state k.
    virtual void step_range(float* params, const float* grads, std::byte* const* states, int64_t a,
                            int64_t b, const StepArgs& s) = 0;
    // The whole range with the optimizer's own state.
    void step(float* params, const float* grads, const StepArgs& s);
    void step(float* params, const float* grads, const OptimConfig& c, float lr, float grad_scale,
              int64_t t) {
        step(params, grads, StepArgs{c, lr, grad_scale, t});
    }

    // The state as fp32 moments (0: first, "exp_avg"; 1: second, "exp_avg_sq"), for
    // checkpoints: elements [a, a + n) relative to begin(); write_moment needs a and a + n on
    // boundaries.
    virtual int moments() const = 0;
    void read_moment(int k, int64_t a, int64_t n, float* out) const;
    void write_moment(int k, int64_t a, int64_t n, const float* in);
    // The same over state held elsewhere (an offloaded group): states[j] at byte
    // state_offset(j, base) of buffer j, as step_range takes them; [a, a + n) within it.
    virtual void read_moment(const std::byte* const* states, int64_t base, int k, int64_t a,
                             int64_t n, float* out) const;
    virtual void write_moment(std::byte* const* states, int64_t base, int k, int64_t a, int64_t n,
                              const float* in);

  protected:
    // The range cut at tensor boundaries, relative to begin_; `tensor` null for alignment
    // padding (zero, and it stays zero).
    struct Segment {
        int64_t begin, end;
        const model::ParamSpec* tensor;
        bool decay() const { return tensor && tensor->decay; }
    };
    const std::vector<Segment>& segments() const { return segments_; }
    // The segments overlapping [a, b), clipped to it.
    std::vector<Segment> segments_in(int64_t a, int64_t b) const;
    // f(i) for every i in [0, n), in chunks of 8192 elements over the OpenMP threads: an
    // element-wise update's loop (each element's arithmetic is its own, so the split changes no
    // bit).
    template <class F>
    static void for_each_element(int64_t n, F f) {
        for_each_chunk(n, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) f(i);
        });
    }
    // f(lo, hi) for those chunks [lo, hi) of at most kChunk elements.
    static constexpr int64_t kChunk = 8192;
    template <class F>
    static void for_each_chunk(int64_t n, F f) {
        const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
        for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(n, (c + 1) * kChunk));
    }
    void set_state_bytes(std::vector<int64_t> bytes) {
        state_bytes_ = std::move(bytes);
    }
    Buffer& state_buffer(int k) {
        return state_[size_t(k)];
    }
    const Buffer& state_buffer(int k) const {
        return state_[size_t(k)];
    }

    const model::ParamLayout* layout_;

  private:
    int64_t begin_, end_;
    std::vector<Segment> segments_;
    std::vector<int64_t> state_bytes_;
    std::vector<Buffer> state_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter): two fp32 moments, 8 bytes a parameter.
class AdamW : public Optimizer {
  public:
    AdamW(const model::ParamLayout& layout, int64_t begin, int64_t end, bool allocate = true);
    void step_range(float* params, const float* grads, std::byte* const* states, int64_t a,
                    int64_t b, const StepArgs& s) override;
    using Optimizer::step;
    int moments() const override { return 2; }

    Buffer& exp_avg() { return state_buffer(0); }
    Buffer& exp_avg_sq() { return state_buffer(1); }
};

}  // namespace weft::optim
