#pragma once
// Text generation with a KV cache: the prompt is run once, then each new token attends to the
// cached keys and values of all before it. When the context window fills, the cache is rebuilt
// from the last half of the window (a sliding window), so generation can go on.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "weft/model/model.hpp"

namespace weft::model {

struct SampleOptions {
    int64_t tokens = 256;
    float temperature = 1.0f;  // 0: greedy
    int64_t top_k = 0;         // 0: off
    float top_p = 1.0f;        // nucleus sampling; 1: off
    uint64_t seed = 1337;
    // Sample only ids below this (0: the whole vocabulary): the ids a tokenizer can write, where
    // the model's vocabulary is larger (an embedding padded past the tokenizer's last id).
    int64_t vocab_limit = 0;
    // Generation ends when this id is chosen (the tokenizer's end of text), without it; -1: never.
    int64_t stop_token = -1;

    void validate() const;
};

// An error naming the first id of `prompt` outside the model's vocabulary, before any of it is
// embedded: a prompt encoded by another model's tokenizer.
void check_prompt(const ModelConfig& cfg, std::span<const int32_t> prompt);

// Picks a token from logits[V] under the options, with the uniform number u in [0, 1).
int32_t pick_token(std::span<const float> logits, const SampleOptions& o, float u);

// One model's cached forward, shared by every sequence it runs: each call brings the sequence's
// own KvCache and position, so that a server runs many sequences through one model's weights
// and scratch, each computed exactly as it would be alone.
class CachedForward {
  public:
    CachedForward(const ModelConfig& cfg, const ParamLayout& layout, const float* params);
    // Feeds tokens at positions pos0 .. (a prompt chunk or the last sampled token) into `cache`
    // and returns the logits of the last one (V floats, valid until the next call).
    std::span<const float> feed(KvCache& cache, int64_t pos0, std::span<const int32_t> tokens);
    const ModelConfig& config() const { return model_->config(); }
    int64_t kv_width() const { return model_->kv_width(); }

  private:
    std::unique_ptr<Model> model_;
    const ParamLayout& layout_;
    float* params_;
    FlatAccess access_;
    std::unique_ptr<Activations> act_;  // for the token count of the last call
    Buffer logits_;
};

class Generator {
  public:
    Generator(const ModelConfig& cfg, const ParamLayout& layout, const float* params);
    // Feeds tokens at the current position (prompt or the last sampled token) and returns the
    // logits of the last one (V floats, valid until the next call).
    std::span<const float> feed(std::span<const int32_t> tokens);
    int64_t position() const { return pos_; }
    void reset() { pos_ = 0; }

  private:
    CachedForward forward_;
    int64_t pos_ = 0;
    KvCache cache_;
};

// The sampling vocabulary: o.vocab_limit when it is below the model's, else the whole of it.
size_t sampled_vocab(const ModelConfig& cfg, const SampleOptions& o);

// Generates o.tokens tokens after the prompt, fewer when o.stop_token is chosen; `on_token` sees
// each as it is chosen.
std::vector<int32_t> generate(const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, std::span<const int32_t> prompt,
                              const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace weft::model
