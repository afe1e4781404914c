#pragma once
// `weft distill-data`: a model's own continuations of passages of a token file, written as a
// token file that `weft train --data` reads: sequence-level distillation data (Kim and Rush
// 2016), the on-policy text a draft learns its target's choices from best (DistillSpec, Zhou et
// al. 2024; docs/decoding.md). Each record is a passage of the file and the model's next tokens
// after it (greedy, or drawn), all within the model's context, so that a training window over a
// record sees the text the model continued and its continuation, as a decode does.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/decode/speculative.hpp"
#include "weft/model/config.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/params.hpp"

namespace weft::decode {

struct ContinuationOptions {
    int64_t passages = 64, prompt_tokens = 64, tokens = 256;
    // Temperature, top-k, top-p and seed (passage i draws from seed + i); its `tokens` is ours.
    model::SampleOptions sample;
    SpecOptions spec;  // none or ngram: the same tokens under greedy, faster
    bool bf16 = false;

    // One error naming the first value that does not fit: counts below 1, a passage and its
    // continuation past the model's context of `positions`, more passages than the text's
    // `text_tokens` tokens hold distinct ones.
    void validate(int64_t positions, int64_t text_tokens) const;
    // Where passage i starts in a text of `text_tokens` tokens: evenly spaced, the last ending
    // at the text's end.
    int64_t passage_start(int64_t i, int64_t text_tokens) const {
        return (text_tokens - prompt_tokens) * i / passages;
    }
};

// The records, passage after passage, and where each starts (a document index's starts).
struct Continuations {
    std::vector<uint32_t> tokens;
    std::vector<int64_t> starts;
};

// Each of `passages` (o.passages passages of o.prompt_tokens tokens, one after the other: the
// text's from passage_start) followed by the model's `tokens` next tokens (no stop token: as
// `weft sample --ignore-eos`).
Continuations continue_passages(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                const float* params, std::span<const int32_t> passages,
                                const ContinuationOptions& o);

}  // namespace weft::decode
