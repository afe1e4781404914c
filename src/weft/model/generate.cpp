#include "weft/model/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/kernels/softmax_rows.hpp"
#include "weft/model/family.hpp"

namespace weft::model {

void SampleOptions::validate() const {
    WEFT_CHECK(tokens >= 0, "--tokens must be non-negative, got {}", tokens);
    WEFT_CHECK(temperature >= 0, "--temperature must be non-negative, got {}", temperature);
    WEFT_CHECK(top_k >= 0, "--top-k must be non-negative, got {}", top_k);
    WEFT_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got {}", top_p);
    WEFT_CHECK(vocab_limit >= 0, "internal: sampling's vocabulary limit {} is negative",
               vocab_limit);
    WEFT_CHECK(stop_token >= -1, "internal: sampling's stop token {} is negative", stop_token);
}

void check_prompt(const ModelConfig& cfg, std::span<const int32_t> prompt) {
    for (size_t i = 0; i < prompt.size(); ++i)
        WEFT_CHECK(prompt[i] >= 0 && prompt[i] < cfg.vocab_size,
                   "prompt token id {} at position {} is outside the model's vocabulary of {} ids "
                   "(expected ids in [0, {})); was the prompt encoded with another model's "
                   "tokenizer?",
                   prompt[i], i, cfg.vocab_size, cfg.vocab_size);
}

namespace {

// The ids of `logits` in decreasing logit order, ties by increasing id (-0 ties +0): a strict
// total order on logits without NaN, so that any sort gives it. A least-significant-digit radix
// sort on the logits' bits, stable over ids in increasing order: O(V), where partial_sort over
// every id compared through the logits (6.6 ms a sampled token at V = 49152).
void by_decreasing_logit(std::span<const float> logits, std::vector<int32_t>& ids) {
    const size_t V = logits.size();
    // Kept between calls: a sampled token's scratch is a few hundred KiB, which fresh vectors
    // took from the system (page faults and zeroing, a fifth of the choice) every time.
    thread_local std::vector<uint32_t> key, key_to;
    thread_local std::vector<int32_t> ids_to;
    thread_local std::vector<size_t> at;
    key.resize(V), key_to.resize(V), ids.resize(V), ids_to.resize(V);
    for (size_t i = 0; i < V; ++i) {
        const float x = logits[i] == 0 ? 0.0f : logits[i];
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        // Increasing in x: negatives' bits reversed, positives' above them; then complemented.
        key[i] = ~(u & 0x80000000u ? ~u : u | 0x80000000u);
        ids[i] = int32_t(i);
    }
    constexpr int kBits = 11;
    constexpr uint32_t kDigits = 1u << kBits;
    at.resize(kDigits + 1);
    for (int shift = 0; shift < 32; shift += kBits) {
        std::fill(at.begin(), at.end(), 0);
        for (uint32_t k : key) ++at[((k >> shift) & (kDigits - 1)) + 1];
        for (uint32_t d = 0; d < kDigits; ++d) at[d + 1] += at[d];
        for (size_t i = 0; i < V; ++i) {
            const size_t to = at[(key[i] >> shift) & (kDigits - 1)]++;
            key_to[to] = key[i];
            ids_to[to] = ids[i];
        }
        key.swap(key_to);
        ids.swap(ids_to);
    }
}

}  // namespace

void sampling_weights(std::span<const float> logits, const SampleOptions& o, SamplingWeights& w) {
    WEFT_CHECK(o.temperature > 0, "internal: a greedy choice has no sampling weights");
    const int64_t V = int64_t(logits.size());
    w.sum = 0;
    const int64_t keep = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
    auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    // A small top-k: partial_sort's heap of k ids; otherwise the whole order, radix sorted.
    if (keep * 64 < V) {
        w.ids.resize(static_cast<size_t>(V));
        std::iota(w.ids.begin(), w.ids.end(), 0);
        std::partial_sort(w.ids.begin(), w.ids.begin() + keep, w.ids.end(), by_logit);
    } else {
        by_decreasing_logit(logits, w.ids);
    }
    w.ids.resize(size_t(keep));
    w.weights.resize(w.ids.size());
    const double top = logits[w.ids[0]];
    for (size_t i = 0; i < w.ids.size(); ++i)
        w.sum += w.weights[i] = std::exp((logits[w.ids[i]] - top) / o.temperature);
    if (o.top_p < 1) {
        double cum = 0;
        size_t n = 0;
        while (n < w.weights.size() && cum < o.top_p * w.sum) cum += w.weights[n++];
        w.weights.resize(n), w.ids.resize(n);
        w.sum = cum;
    }
}

SamplingWeights sampling_weights(std::span<const float> logits, const SampleOptions& o) {
    SamplingWeights w;
    sampling_weights(logits, o, w);
    return w;
}

int32_t pick_token(std::span<const float> logits, const SampleOptions& o, float u) {
    if (o.temperature == 0) return int32_t(kernels::argmax(logits.data(), int64_t(logits.size())));
    thread_local SamplingWeights w;  // its vectors' memory kept between tokens
    sampling_weights(logits, o, w);
    double target = double(u) * w.sum, acc = 0;
    for (size_t i = 0; i < w.weights.size(); ++i) {
        acc += w.weights[i];
        if (target < acc) return w.ids[i];
    }
    return w.ids.back();
}

float token_logprob(std::span<const float> logits, int32_t t) {
    return kernels::log_softmax_at(logits.data(), int64_t(logits.size()), t);
}

float token_logprob_top(std::span<const float> logits, int32_t t, int64_t n,
                        std::vector<TokenLogprob>& top) {
    const int64_t V = int64_t(logits.size());
    const kernels::LogSoftmaxRow terms = kernels::log_softmax_terms(logits.data(), V);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    kernels::top_indices(logits.data(), V, n, ids.data());
    top.clear();
    for (int32_t id : ids) top.push_back({id, terms.at(logits[size_t(id)])});
    return terms.at(logits[size_t(t)]);
}

RowForward::RowForward(const ModelConfig& cfg, const ParamLayout& layout, const float* params,
                       bool bf16, TpComm* tp)
    : model_(make_model(cfg, tp_shard(tp), tp)),
      // Read only: no backward runs.
      access_(layout, const_cast<float*>(params), nullptr),
      mm_(bf16),
      bf16_(bf16) {
    WEFT_CHECK(layout.total == model_->layout().total,
               "internal: parameters of {} floats for a model of {}", layout.total,
               model_->layout().total);
}

std::span<const float> RowForward::run(const RowBatch& b, KvPool& kv) {
    const int64_t V = model_->config().vocab_size;
    WEFT_CHECK(kv.bf16() == bf16_, "internal: a {} KV pool for a {} forward",
               kv.bf16() ? "bf16" : "fp32", bf16_ ? "bf16" : "fp32");
    logits_.resize(b.logit_rows.size() * size_t(V));
    if (b.rows() > 0) model_->forward_rows(b, access_, kv, mm_, logits_.data());
    return logits_;
}

Generator::Generator(const ModelConfig& cfg, const ParamLayout& layout, const float* params,
                     bool bf16, TpComm* tp)
    : forward_(cfg, layout, params, bf16, tp),
      pool_((cfg.n_positions + 15) / 16, cfg.n_layer, forward_.kv_width(), cfg.head_dim(), 16,
            bf16) {}

std::span<const float> Generator::feed(std::span<const int32_t> tokens) {
    WEFT_CHECK(!tokens.empty() && pos_ + int64_t(tokens.size()) <= forward_.config().n_positions,
               "internal: feeding {} tokens at position {}", tokens.size(), pos_);
    pool_.grow(table_, pos_ + int64_t(tokens.size()));
    batch_.clear();
    batch_.add(tokens, pos_, table_, true);
    std::span<const float> logits = forward_.run(batch_, pool_);
    pos_ += int64_t(tokens.size());
    return logits;
}

void Generator::reset() {
    pool_.release_all(table_);
    pos_ = 0;
}

size_t sampled_vocab(const ModelConfig& cfg, const SampleOptions& o) {
    return o.vocab_limit > 0 && o.vocab_limit < cfg.vocab_size ? size_t(o.vocab_limit)
                                                               : size_t(cfg.vocab_size);
}

std::vector<int32_t> generate(const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, std::span<const int32_t> prompt,
                              const SampleOptions& o, const std::function<void(int32_t)>& on_token,
                              bool bf16, TpComm* tp) {
    o.validate();
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    check_prompt(cfg, prompt);
    const size_t V = sampled_vocab(cfg, o);
    Generator g(cfg, layout, params, bf16, tp);
    std::vector<int32_t> context(prompt.begin(), prompt.end());
    const int64_t window = cfg.n_positions;
    if (int64_t(context.size()) > window)  // only the last window of a long prompt is seen
        context.erase(context.begin(), context.end() - window);
    std::span<const float> logits = g.feed(context);
    Philox rng = philox_for(o.seed, "sample");
    std::vector<int32_t> out;
    for (int64_t i = 0; i < o.tokens; ++i) {
        int32_t t = pick_token(logits.first(V), o, rng.uniform(uint64_t(i)));
        if (t == o.stop_token) break;
        out.push_back(t);
        context.push_back(t);
        if (on_token) on_token(t);
        if (i + 1 == o.tokens) break;
        if (g.position() + 1 > window) {
            // Window full: keep the last half as context and rebuild the cache from it.
            context.erase(context.begin(), context.end() - window / 2);
            g.reset();
            logits = g.feed(context);
        } else {
            logits = g.feed(std::span<const int32_t>(&context.back(), 1));
        }
    }
    return out;
}

}  // namespace weft::model
