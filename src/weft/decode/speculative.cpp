#include "weft/decode/speculative.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/decode/accept.hpp"
#include "weft/decode/ppd.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::decode {

void SpecStats::count(const TokenTree& tree, const Verdict& v) {
    guessed += tree.size();
    accepted += int64_t(v.nodes.size());
    int deepest = 0;
    for (int i = 0; i < tree.size(); ++i) deepest = std::max(deepest, tree.depth(i));
    for (int d = 0; d < deepest; ++d) ++guessed_at[size_t(d)];
    for (size_t d = 0; d < v.nodes.size(); ++d) ++accepted_at[d];
}

SpecText::SpecText(std::span<const int32_t> prompt, int64_t window_, const model::SampleOptions& o_,
                   const std::function<void(int32_t)>& on_token_)
    : context(prompt.begin(), prompt.end()), window(window_), o(o_), on_token(on_token_) {
    if (int64_t(context.size()) > window) context.erase(context.begin(), context.end() - window);
}

bool SpecText::take(int32_t t) {
    if (t == o.stop_token) return !(stopped = true);
    out.push_back(t);
    context.push_back(t);
    if (on_token) on_token(t);
    return true;
}

void SpecText::take(const TokenTree& tree, const Verdict& v) {
    for (int n : v.nodes)
        if (!take(tree.tokens[size_t(n)])) return;
    take(v.next);
}

bool SpecText::step(const std::function<void()>& read_context) {
    while (going()) {
        if (context_read && !slide()) return true;
        read_context();
        context_read = true;
    }
    return false;
}

bool SpecText::slide() {
    if (pos() < window) return false;
    context.erase(context.begin(), context.end() - window / 2);
    return true;
}

int64_t SpecText::room() const {
    return std::min(window - pos() - 1, o.tokens - int64_t(out.size()) - 1);
}

SpecSession::SpecSession(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                         const float* params, bool bf16, model::TpComm* tp,
                         std::span<const int32_t> prompt, const model::SampleOptions& o,
                         const std::function<void(int32_t)>& on_token, SpecStats* stats,
                         int64_t depth)
    : st(stats ? *stats : local),
      forward(cfg, layout, params, bf16, tp),
      kv((cfg.n_positions + 15) / 16, cfg.n_layer, forward.kv_width(), cfg.head_dim(), 16,
         forward.kv_bf16()),
      text(prompt, cfg.n_positions, o, on_token),
      plain(philox_for(o.seed, "sample")),
      rng(philox_for(o.seed, "speculative")) {
    st.guessed_at.assign(size_t(depth), 0);
    st.accepted_at.assign(size_t(depth), 0);
}

std::span<const float> SpecSession::run() {
    ++st.forwards;
    return forward.run(batch, kv);
}

std::vector<int32_t> SpecSession::finish() {
    st.tokens = int64_t(text.out.size());
    return std::move(text.out);
}

void SpecOptions::validate() const {
    WEFT_CHECK(kind == "none" || kind == "ngram" || kind == "draft" || kind == "ppd",
               "--spec must be none, ngram, draft or ppd, got '{}'", kind);
    WEFT_CHECK(kind != "draft" || !draft.empty(),
               "--spec draft needs --draft DIR (a weft checkpoint or Hugging Face model directory "
               "with the model's tokenizer)");
    WEFT_CHECK(kind == "draft" || draft.empty(), "--draft {} is for --spec draft, got --spec {}",
               draft.string(), kind);
    WEFT_CHECK(kind != "ppd" || !ppd_file.empty() || ppd,
               "--spec ppd needs --ppd: the prompt tokens `weft train --ppd-tokens K` saved");
    WEFT_CHECK(kind == "ppd" || ppd_file.empty(), "--ppd {} is for --spec ppd, got --spec {}",
               ppd_file.string(), kind);
    WEFT_CHECK(vocab_from.empty() || kind == "draft" || kind == "ppd",
               "--spec-vocab-from {} is for --spec draft or ppd (their proposals), got --spec {}",
               vocab_from.string(), kind);
    WEFT_CHECK(tree >= 0, "--spec-tree must be 0 (a chain of guesses) or more nodes, got {}", tree);
    WEFT_CHECK(tree == 0 || kind == "ppd",
               "--spec-tree {} is for --spec ppd (its prompts' ranked candidates), got --spec {}",
               tree, kind);
    WEFT_CHECK(draft_width >= 1, "--draft-width must be 1 (a chain of guesses) or more, got {}",
               draft_width);
    WEFT_CHECK(draft_width == 1 || kind == "draft",
               "--draft-width {} is for --spec draft, got --spec {}", draft_width, kind);
    WEFT_CHECK(vocab >= 0, "--spec-vocab must be 0 (the whole vocabulary) or more, got {}", vocab);
    ngram.validate();
}

int SpecOptions::guesses() const {
    if (ngram.max_tokens > 0) return ngram.max_tokens;
    if (kind == "draft") return shortlist || !vocab_from.empty() ? 3 : 1;
    if (kind == "ppd") return tree > 0 ? 64 : 1;  // 64: all its prompts (PpdProposer clamps)
    return 5;
}

TokenTree propose(const SpecOptions& spec, std::span<const int32_t> context, int64_t room) {
    NgramOptions no = spec.ngram;
    no.max_tokens = int(std::min<int64_t>(spec.guesses(), room));
    return spec.kind == "ngram" && no.max_tokens > 0 ? propose_ngram(context, no) : TokenTree{};
}

void tree_rows(int32_t root, const TokenTree& tree, std::vector<int32_t>& rows,
               std::vector<int32_t>& parents) {
    rows.assign(1, root);
    parents.assign(1, -1);
    for (int i = 0; i < tree.size(); ++i) {
        rows.push_back(tree.tokens[size_t(i)]);
        parents.push_back(tree.parents[size_t(i)] + 1);
    }
}

Verdict accept(const TokenTree& tree, const RowLogits& logits, const model::SampleOptions& o,
               const Philox& rng, uint64_t& counter, const Proposal& proposal) {
    return o.temperature == 0 ? accept_greedy(tree, logits)
                              : accept_sampling(tree, logits, o, proposal, rng, counter);
}

void keep_accepted(model::KvPool& kv, const model::BlockTable& table, int64_t pos,
                   const std::vector<int>& nodes, std::vector<int64_t>* moved) {
    for (size_t d = 0; d < nodes.size(); ++d) {
        if (nodes[d] == int(d)) continue;
        const int64_t from = kv.slot(table, pos + 1 + nodes[d]);
        const int64_t to = kv.slot(table, pos + 1 + int64_t(d));
        kv.copy_slot(from, to);
        if (moved) moved->insert(moved->end(), {from, to});
    }
}

std::vector<int32_t> generate_speculative(const model::ModelConfig& cfg,
                                          const model::ParamLayout& layout, const float* params,
                                          std::span<const int32_t> prompt,
                                          const model::SampleOptions& o, const SpecOptions& spec,
                                          const std::function<void(int32_t)>& on_token, bool bf16,
                                          SpecStats* stats, DraftModel* draft, model::TpComm* tp) {
    o.validate();
    spec.validate();
    WEFT_CHECK((spec.kind == "draft") == (draft != nullptr),
               "internal: --spec {} with{} a draft model", spec.kind, draft ? "" : "out");
    if (draft) {
        check_draft(cfg, draft->config());
        draft->set_shortlist(spec.shortlist.get());
        draft->set_width(spec.draft_width);
    }
    WEFT_CHECK(!(draft && tp), "internal: a draft model under tensor parallelism");
    if (spec.kind == "none")
        return model::generate(cfg, layout, params, prompt, o, on_token, bf16, tp);
    if (spec.kind == "ppd") {
        WEFT_CHECK(spec.ppd, "internal: --spec ppd without its prompt tokens loaded");
        WEFT_CHECK(!(tp && spec.shortlist), "internal: a vocabulary shortlist under tp");
        return generate_ppd(cfg, layout, params, prompt, o, *spec.ppd, spec.guesses(), on_token,
                            bf16, stats, spec.shortlist.get(), spec.tree, nullptr, tp);
    }
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    model::check_prompt(cfg, prompt);
    const size_t V = model::sampled_vocab(cfg, o);
    SpecSession s(cfg, layout, params, bf16, tp, prompt, o, on_token, stats, spec.guesses());
    SpecText& text = s.text;
    // The draft's own draws: independent of the verdict's, as the acceptance rule needs.
    const Philox draft_rng = philox_for(o.seed, "draft");
    uint64_t draft_counter = 0;
    DraftSeq draft_seq;
    Guesses guess;
    auto read_context = [&] {
        s.kv.release_all(s.table);
        s.kv.grow(s.table, int64_t(text.context.size()));
        s.batch.clear();
        s.batch.add(text.context, 0, s.table, true);
        const std::span<const float> logits = s.run();
        text.take(
            model::pick_token(logits.first(V), o, s.plain.uniform(uint64_t(text.out.size()))));
    };
    std::vector<int32_t> rows, parents;
    // From the first token on, the last chosen token is the root of every verify, at `pos`, the
    // positions before it in the cache.
    while (text.step(read_context)) {
        const int64_t pos = text.pos();
        if (draft)
            guess = draft->propose(draft_seq, text.context,
                                   std::min<int64_t>(text.room(), spec.guesses()), o, draft_rng,
                                   draft_counter);
        else
            guess = {propose(spec, text.context, text.room()), {}};
        // Leaves beside the draft's chain take slots past its depth: the first ones the window
        // holds.
        guess.tree.truncate(cfg.n_positions - pos - 1);
        const TokenTree& tree = guess.tree;
        tree_rows(text.context.back(), tree, rows, parents);
        s.kv.grow(s.table, pos + int64_t(rows.size()));
        s.batch.clear();
        s.batch.add_tree(rows, parents, pos, s.table);
        const std::span<const float> logits = s.run();
        auto row_logits = [&](int r) {
            return logits.subspan(size_t(r) * size_t(cfg.vocab_size), V);
        };
        const Verdict v = accept(tree, row_logits, o, s.rng, s.counter, guess.proposal());
        keep_accepted(s.kv, s.table, pos, v.nodes);
        s.st.count(tree, v);
        // The rows after the accepted path are stale, and the next verify writes over them.
        text.take(tree, v);
    }
    if (draft) draft->release(draft_seq);
    return s.finish();
}

}  // namespace weft::decode
