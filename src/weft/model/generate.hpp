#pragma once
// Text generation with a paged KV cache: the prompt is run once, then each new token attends to the
// cached keys and values of all before it. When the context window fills, the cache is rebuilt
// from the last half of the window (a sliding window), so generation can go on.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "weft/model/kv_pool.hpp"
#include "weft/model/model.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/model/row_products.hpp"
#include "weft/model/tp_comm.hpp"

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

// The candidates sampling draws from (temperature > 0): the ids left after top-k and top-p, in
// decreasing logit order (ties by id, so the choice is reproducible), their unnormalised
// weights exp((logit - top) / temperature), and the weights' sum.
struct SamplingWeights {
    std::vector<int32_t> ids;
    std::vector<double> weights;
    double sum = 0;
};
SamplingWeights sampling_weights(std::span<const float> logits, const SampleOptions& o);
// The same into `w`, reusing its vectors' memory (a sampled token's choice, every step).
void sampling_weights(std::span<const float> logits, const SampleOptions& o, SamplingWeights& w);

// Picks a token from logits[V] under the options, with the uniform number u in [0, 1).
int32_t pick_token(std::span<const float> logits, const SampleOptions& o, float u);

// The log-probability of token t under logits (the model's own, not the sampling's
// temperature), in float by kernels::log_softmax_at (vectorised: it runs per request and
// token in the serving engine's thread): the same bits for the same logits.
float token_logprob(std::span<const float> logits, int32_t t);

// A token and its log-probability.
struct TokenLogprob {
    int32_t id = 0;
    float logprob = 0;
};
// token_logprob of t, and in `top` the n most likely tokens (most likely first; among equal
// logits the lower id first; n at most the logits' size) with theirs: each the bits
// token_logprob gives it. OpenAI's `top_logprobs`.
float token_logprob_top(std::span<const float> logits, int32_t t, int64_t n,
                        std::vector<TokenLogprob>& top);

// Every unit, as tensor-parallel rank tp->rank() of tp->size() holds them (null: the whole
// model): the shard serving and sampling run.
inline ModelShard tp_shard(const TpComm* tp) {
    ModelShard s;
    s.tp_rank = tp ? tp->rank() : 0;
    s.tp = tp ? tp->size() : 1;
    return s;
}

// One model's forward over the rows of many sequences at once (Model::forward_rows): the one
// `weft sample` and `weft serve` both run, so that a sequence's bits are the same alone, among
// others, and in prompt chunks of any size. `bf16`: the products on weights rounded to bf16.
// `tp`: this rank's shard of a tensor-parallel group (null: the whole model), `params` laid out
// for it; every rank of the group runs the same batches, and each gets the logits.
class RowForward {
  public:
    RowForward(const ModelConfig& cfg, const ParamLayout& layout, const float* params,
               bool bf16 = false, TpComm* tp = nullptr);
    // Runs the batch's rows, their keys and values into `kv`; returns the logits of its
    // logit_rows ([n, V], valid until the next call).
    std::span<const float> run(const RowBatch& b, KvPool& kv);
    const ModelConfig& config() const { return model_->config(); }
    int64_t kv_width() const { return model_->kv_width(); }
    // Whether its KV pools hold bf16 (under bf16 products): the pool it runs with must.
    bool kv_bf16() const { return bf16_; }

  private:
    std::unique_ptr<Model> model_;
    FlatAccess access_;
    RowProducts mm_;
    bool bf16_;
    std::vector<float> logits_;
};

class Generator {
  public:
    Generator(const ModelConfig& cfg, const ParamLayout& layout, const float* params,
              bool bf16 = false, TpComm* tp = nullptr);
    // Feeds tokens at the current position (prompt or the last sampled token) and returns the
    // logits of the last one (V floats, valid until the next call).
    std::span<const float> feed(std::span<const int32_t> tokens);
    int64_t position() const { return pos_; }
    void reset();

  private:
    RowForward forward_;
    KvPool pool_;  // the whole context's blocks
    BlockTable table_;
    RowBatch batch_;
    int64_t pos_ = 0;
};

// The sampling vocabulary: o.vocab_limit when it is below the model's, else the whole of it.
size_t sampled_vocab(const ModelConfig& cfg, const SampleOptions& o);

// Generates o.tokens tokens after the prompt, fewer when o.stop_token is chosen; `on_token` sees
// each as it is chosen. Under tensor parallelism (`tp`, RowForward's) every rank of the group
// calls it alike and chooses the same tokens from the same logits.
std::vector<int32_t> generate(const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, std::span<const int32_t> prompt,
                              const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token = {}, bool bf16 = false,
                              TpComm* tp = nullptr);

}  // namespace weft::model
