#pragma once
// `weft train --ppd-tokens K --base RUN`: the prompt tokens of Parallel Prompt Decoding
// (decode/ppd.hpp) trained with the base model frozen, by distilling the base model's own
// next-token choices (Chen et al. 2024). A training sequence is a window's first t + 1 tokens
// and then the K prompt tokens at positions t + 1 .. t + K: plain causal attention gives prompt
// j exactly what it sees when decoding (the context up to t and the prompts before it), and its
// target is token j + 1 of the base model's own continuation of those t + 1 tokens (greedy, or
// drawn): what a verify compares prompt j's guess with. One insertion point a step, t drawn anew
// each step over the whole window, so the prompts learn every position they will sit at. Only the
// prompts' K x n_embd floats change: the forward reads the base weights, and the backward computes
// only the gradients of the layers' inputs (Model::block_backward_input), down to the prompt rows
// of the embedding's output.
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/core/philox.hpp"
#include "weft/decode/ppd_file.hpp"
#include "weft/model/model.hpp"
#include "weft/train/memory.hpp"
#include "weft/train/options.hpp"
#include "weft/train/teacher.hpp"

namespace weft::train {

class PpdTrainer {
  public:
    // `params` (the base model's, read only) must outlive the trainer. `target`: argmax (the
    // base model's greedy choice) or sample (a token drawn from its distribution at temperature
    // 1: an unbiased estimate of the soft-target cross-entropy's gradient, at no extra cost).
    PpdTrainer(const model::ModelConfig& cfg, const float* params, int64_t tokens, uint64_t seed,
               const std::string& target);

    // One AdamW step at learning rate `lr` (step `step`, 0-based) on B windows of T tokens
    // (tokens[B * T]) with the prompts after position t (T >= t + 1 + K); the mean loss of the
    // prompts' targets before the step.
    double step(const int32_t* tokens, int64_t B, int64_t T, int64_t t, float lr, int64_t step);

    // The targets of a step's prompts, [B, K]: for each window, tokens 2 .. K + 1 of the base
    // model's continuation of its first t + 1 tokens (its argmax, or drawn with `sample`).
    std::vector<int32_t> targets(const int32_t* tokens, int64_t B, int64_t T, int64_t t);

    const decode::PpdPrompts& prompts() const { return p_; }
    decode::PpdPrompts& prompts() { return p_; }

  private:
    std::unique_ptr<model::Model> model_;
    const float* params_;
    Teacher teacher_;  // the base model as rows: what writes the targets
    Buffer grads_;     // what the head's fused loss writes of the frozen weights' gradients; unread
    decode::PpdPrompts p_;
    std::vector<float> m_, v_, grad_;
    Philox rng_;
    bool sample_;
    uint64_t draws_ = 0;
};

// What --ppd-tokens holds for B windows of T tokens and K prompts: the base model's weights and
// the gradient buffer its fused head writes, the prompts' AdamW state, the blocks' activations
// over whole windows and the head's over the prompt rows, the model's scratch, and the base model
// as teacher (train::teacher_memory: its forward and the logits of its continuations).
// `baseline`: resident bytes before any of it.
MemoryEstimate ppd_memory(const model::ModelConfig& cfg, int64_t B, int64_t T, int64_t K,
                          int64_t baseline);

// --ppd-tokens: every check before any work, then the training and the checkpoint in o.out.
void run_ppd_training(const TrainOptions& o);

}  // namespace weft::train
