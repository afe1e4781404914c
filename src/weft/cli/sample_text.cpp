#include "weft/cli/sample_text.hpp"

#include <fmt/format.h>

#include <chrono>

#include "weft/data/tokenizer.hpp"

namespace weft::cli {

void sample_text(const train::LoadedModel& m, const data::Tokenizer& tok, const std::string& prompt,
                 const model::SampleOptions& o, bool ignore_eos, bool bf16,
                 const decode::SpecOptions& spec, decode::DraftModel* draft, std::FILE* out,
                 model::TpComm* tp) {
    const bool speak = !tp || tp->rank() == 0;
    std::vector<int32_t> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.eot());
    const model::ModelConfig& cfg = m.model->config();
    model::check_prompt(cfg, ids);  // before anything is printed
    // Neither stops sampling, but either may explain text that makes no sense.
    if (speak && tok.vocab_size() < cfg.vocab_size)
        fmt::print(stderr,
                   "weft: warning: the tokenizer has {} ids, fewer than the model's vocabulary of "
                   "{}: ids from {} on are never sampled (fine for an embedding padded past the "
                   "tokenizer; else the model was trained with another tokenizer)\n",
                   tok.vocab_size(), cfg.vocab_size, tok.vocab_size());
    if (speak && int64_t(ids.size()) > cfg.n_positions)
        fmt::print(stderr,
                   "weft: warning: the prompt is {} tokens, longer than the model's context of "
                   "{}: only its last {} tokens are seen\n",
                   ids.size(), cfg.n_positions, cfg.n_positions);
    // Ids past the tokenizer's could not be written out.
    model::SampleOptions within = o;
    within.vocab_limit = tok.vocab_size();
    // As transformers' generate stops at eos_token_id: the model says the text is over.
    if (!ignore_eos) within.stop_token = tok.eot();
    if (speak) std::fputs(prompt.c_str(), out);
    // Byte-level BPE: the bytes of successive tokens concatenate to the text, even where one
    // character spans two tokens.
    decode::SpecStats st;
    // Prefill: from here to the first token (the weights' bf16 copy, the prompt's forward).
    // Decode: from the first token to the last, the figure a speedup of decoding is read from
    // (a whole process's time is mostly start-up at a few hundred tokens).
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point first, last;
    int64_t emitted = 0;
    decode::generate_speculative(
        m.model->config(), m.model->layout(), m.params.data(), ids, within, spec,
        [&](int32_t t) {
            last = Clock::now();
            if (emitted++ == 0) first = last;
            if (!speak) return;
            std::string bytes = tok.decode_token(t);
            std::fwrite(bytes.data(), 1, bytes.size(), out);
            std::fflush(out);
        },
        bf16, &st, draft, tp);
    if (!speak) return;
    std::fputs("\n", out);
    if (emitted > 0) {
        const double prefill = std::chrono::duration<double>(first - start).count();
        const double decode = std::chrono::duration<double>(last - first).count();
        fmt::print(stderr,
                   "weft: timing: prefill {:.4f} s ({} prompt tokens), decode {:.4f} s for {} more "
                   "tokens ({:.1f} tokens/s)\n",
                   prefill, ids.size(), decode, emitted - 1,
                   decode > 0 ? double(emitted - 1) / decode : 0.0);
    }
    if (spec.kind == "none") return;
    // Per depth: of the verifies that guessed that far, how many kept the guess there.
    std::string depths;
    for (size_t d = 0; d < st.guessed_at.size() && st.guessed_at[d] > 0; ++d)
        depths += fmt::format(" {}/{}", st.accepted_at[d], st.guessed_at[d]);
    fmt::print(stderr,
               "weft: speculation ({}): {} tokens in {} forwards (tau {:.2f}), {} of {} guessed "
               "tokens accepted; by depth:{}\n",
               spec.kind, st.tokens, st.forwards, st.tokens_per_forward(), st.accepted, st.guessed,
               depths);
}

}  // namespace weft::cli
