#include "weft/decode/continuations.hpp"

#include "weft/core/error.hpp"

namespace weft::decode {

void ContinuationOptions::validate(int64_t positions, int64_t text_tokens) const {
    WEFT_CHECK(prompt_tokens >= 1 && prompt_tokens < positions,
               "--prompt-tokens must be between 1 and {} (below the model's context of {}, to "
               "leave room for a continuation), got {}",
               positions - 1, positions, prompt_tokens);
    WEFT_CHECK(tokens >= 1 && prompt_tokens + tokens <= positions,
               "--tokens must be between 1 and {} (--prompt-tokens {} and the continuation "
               "within the model's context of {}), got {}",
               positions - prompt_tokens, prompt_tokens, positions, tokens);
    WEFT_CHECK(text_tokens >= prompt_tokens,
               "--data holds {} tokens, fewer than one passage of --prompt-tokens {}", text_tokens,
               prompt_tokens);
    const int64_t distinct = text_tokens - prompt_tokens + 1;
    WEFT_CHECK(passages >= 1 && passages <= distinct,
               "--passages must be between 1 and {} (the distinct passages of {} tokens in "
               "--data's {}), got {}",
               distinct, prompt_tokens, text_tokens, passages);
    WEFT_CHECK(spec.kind == "none" || spec.kind == "ngram",
               "--spec must be none or ngram, got '{}'", spec.kind);
    sample.validate();
}

Continuations continue_passages(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                const float* params, std::span<const int32_t> passages,
                                const ContinuationOptions& o) {
    const int64_t P = o.prompt_tokens;
    o.validate(cfg.n_positions, int64_t(passages.size()));
    WEFT_CHECK(int64_t(passages.size()) == o.passages * P,
               "internal: {} tokens for {} passages of {}", passages.size(), o.passages, P);
    Continuations c;
    c.tokens.reserve(size_t(o.passages * (P + o.tokens)));
    for (int64_t i = 0; i < o.passages; ++i) {
        const std::span<const int32_t> passage = passages.subspan(size_t(i * P), size_t(P));
        model::SampleOptions s = o.sample;
        s.tokens = o.tokens;
        s.seed = o.sample.seed + uint64_t(i);
        c.starts.push_back(int64_t(c.tokens.size()));
        c.tokens.insert(c.tokens.end(), passage.begin(), passage.end());
        for (int32_t t : generate_speculative(cfg, layout, params, passage, s, o.spec, {}, o.bf16))
            c.tokens.push_back(uint32_t(t));
    }
    return c;
}

}  // namespace weft::decode
