#pragma once
// The analytic memory of a training process, by category, and what the OS says it used.
#include <cstdint>
#include <string>

#include "weft/model/config.hpp"

namespace weft::train {

struct MemoryEstimate {
    int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, scratch = 0, baseline = 0;
    // ZeRO's temporaries within a step (parallel::DataParallel::working_bytes): gathered units,
    // gradient buckets and the reductions in flight. Between steps the pool keeps them (ZeRO
    // 2-3, parallel/buffer_pool.hpp) or glibc's heap does (0-1), so a checkpoint's staging adds
    // to them (measured).
    int64_t working = 0;
    // The checkpoint staging buffer: every rank's part of weights and moments (fp32), copied for
    // the writer (held while a synchronous save writes; kept by --async-checkpoint).
    int64_t checkpoint = 0;
    // --dtype bf16: the products' per-thread operand copies and, where bf16 is emulated, the
    // fp32 buffers they are widened into (model/bf16_scratch.hpp).
    int64_t bf16_operands = 0;
    // --dtype bf16: the bf16 attention kernel's fp32 copies of one sequence
    // (model::bf16_attention_scratch_bytes).
    int64_t bf16_attention = 0;
    // --teacher: the frozen teacher's weights, forward and logits (train::teacher_memory).
    int64_t teacher = 0;
    int64_t total() const {
        return weights + grads + optimizer + activations + scratch + working + baseline +
               checkpoint + bf16_operands + bf16_attention + teacher;
    }
    std::string describe() const;
};

// One process or data-parallel rank: model state (fp32 weights, gradients, the optimizer's
// state, as much of each as its ZeRO stage keeps); the activations of one micro-batch of B
// sequences of T tokens; the backward and head scratch; `working_bytes` (ZeRO's gathered units and
// gradient buckets); `baseline` is the resident size before the model is allocated (code,
// libraries).
MemoryEstimate estimate_memory(const model::ModelConfig& cfg, int64_t weights, int64_t grads,
                               int64_t optimizer, int64_t working_bytes, int64_t B, int64_t T,
                               int64_t baseline_bytes);

// "12.5 MiB": how the estimates print a size.
std::string mib(int64_t bytes);

int64_t current_rss_bytes();  // VmRSS
int64_t peak_rss_bytes();     // VmHWM

}  // namespace weft::train
