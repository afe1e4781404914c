#pragma once
// AdamW over a range of the flat parameter buffer (the whole buffer in one process, this rank's
// shard under ZeRO), the learning-rate schedule, and global-norm clipping.
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/params.hpp"

namespace weft::optim {

struct OptimConfig {
    float lr = 6e-4f;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
    float grad_clip = 1.0f;              // global-norm clip; 0 disables
    std::string lr_schedule = "cosine";  // cosine | constant
    int64_t warmup = 0;                  // linear warm-up steps
    float min_lr_ratio = 0.1f;           // cosine decays to lr * min_lr_ratio at the last step

    void validate() const;
};

// Learning rate of optimizer step `step` (0-based) of `total` steps: linear warm-up from lr/warmup
// to lr over `warmup` steps, then constant or cosine down to lr * min_lr_ratio.
float learning_rate(const OptimConfig& c, int64_t step, int64_t total);

// The factor that scales gradients so that their global norm is at most grad_clip.
float clip_scale(const OptimConfig& c, double grad_norm);

class AdamW {
  public:
    // Keeps moments for the flat-buffer range [begin, end); in memory unless `offloaded` (then
    // the caller keeps them, e.g. on disk: offload/streamed_state.hpp, and calls step_range).
    AdamW(const model::ParamLayout& layout, int64_t begin, int64_t end, bool offloaded = false);
    // params and grads point at element `begin` of their flat buffers. `t` is 1-based.
    void step(float* params, const float* grads, const OptimConfig& c, float lr, float grad_scale,
              int64_t t);
    // The same update for elements [begin + a, begin + b) only, with moments the caller holds:
    // params, grads, m and v point at element begin + a. Element by element the result is
    // step()'s, however the range is cut.
    void step_range(int64_t a, int64_t b, float* params, const float* grads, float* m, float* v,
                    const OptimConfig& c, float lr, float grad_scale, int64_t t) const;
    // Per-element state arrays (exp_avg, exp_avg_sq), as a streamed step names them.
    static constexpr const char* kStateNames[] = {"exp_avg", "exp_avg_sq"};

    int64_t begin() const { return begin_; }
    int64_t end() const { return end_; }
    Buffer& exp_avg() { return m_; }
    Buffer& exp_avg_sq() { return v_; }

  private:
    struct Segment {
        int64_t begin, end;  // relative to begin_
        bool decay;
    };
    int64_t begin_, end_;
    std::vector<Segment> segments_;
    Buffer m_, v_;
};

}  // namespace weft::optim
