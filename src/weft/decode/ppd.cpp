#include "weft/decode/ppd.hpp"

#include <algorithm>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/model/kv_pool.hpp"

namespace weft::decode {

int64_t PpdVerify::chain_under(const Verdict& v) const {
    return chain_row[v.nodes.empty() ? 0 : size_t(v.nodes.back()) + 1];
}

Acceptance PpdCounts::rates() const {
    Acceptance acc(hits.size());
    for (size_t d = 0; d < hits.size(); ++d)
        for (int64_t h : hits[d]) acc[d].push_back(seen[d] ? double(h) / double(seen[d]) : 0.0);
    return acc;
}

void PpdCounts::count(const std::vector<std::vector<int32_t>>& ranked,
                      std::span<const int32_t> truth) {
    for (size_t d = 0; d < ranked.size() && d < truth.size(); ++d) {
        if (hits.size() <= d) {
            hits.emplace_back(size_t(width), 0);
            seen.push_back(0);
        }
        ++seen[d];
        const auto r = std::find(ranked[d].begin(), ranked[d].end(), truth[d]);
        if (r != ranked[d].end() && r - ranked[d].begin() < width)
            ++hits[d][size_t(r - ranked[d].begin())];
    }
}

PpdProposer::PpdProposer(const PpdPrompts& ppd, int max_guesses, int64_t vocab,
                         const model::VocabShortlist* shortlist, int tree_nodes)
    : ppd_(ppd), shortlist_(shortlist), vocab_(vocab) {
    const int depth = int(std::clamp<int64_t>(max_guesses, 0, ppd.tokens));
    // Rates never measured: default ones, four candidates a depth.
    shape_ = tree_nodes == 0
                 ? TreeShape::chain(depth)
                 : choose_tree(ppd.acceptance.empty() ? default_acceptance(int(ppd.tokens), 4)
                                                      : ppd.acceptance,
                               tree_nodes, depth);
    chain_len_ = shape_.max_depth();
    for (int64_t j = 0; j < chain_len_; ++j) prompt_ids_.push_back(int32_t(vocab + j));
}

void PpdProposer::attach(model::RowBatch& b) const {
    b.extra = ppd_.embeddings.data();
    b.extra_count = ppd_.tokens;
    b.shortlist = shortlist_;
}

int64_t PpdProposer::add_context(model::RowBatch& b, std::span<const int32_t> t, int64_t pos0,
                                 const model::BlockTable& table, int64_t window) const {
    const int64_t chain = chain_after(pos0 + int64_t(t.size()), window), row0 = b.rows();
    std::vector<int32_t> ids(t.begin(), t.end());
    ids.insert(ids.end(), prompt_ids_.begin(), prompt_ids_.begin() + chain);
    b.add(ids, pos0, table, false);
    for (int64_t r = int64_t(t.size()) - 1; r < int64_t(ids.size()); ++r)
        b.logit_rows.push_back(row0 + r);
    return chain;
}

PpdVerify PpdProposer::verify(int32_t root, const TokenTree& guesses, int64_t room, int64_t pos,
                              int64_t window) const {
    PpdVerify v;
    v.tree = guesses.within(int(std::clamp<int64_t>(room, 0, chain_len_)));
    // A tree's nodes take a slot each after the root's, more than its depth: the first ones
    // the window holds.
    v.tree.truncate(window - pos - 1);
    tree_rows(root, v.tree, v.rows, v.parents);
    const int64_t tree_n = int64_t(v.rows.size());
    v.chain_row.assign(size_t(tree_n), -1);
    for (int64_t r = 0; r < tree_n; ++r) {
        if (chain_len_ == 0 || pos + int64_t(v.rows.size()) + chain_len_ > window) break;
        v.chain_row[size_t(r)] = int64_t(v.rows.size());
        for (int64_t j = 0; j < chain_len_; ++j) {
            v.rows.push_back(prompt_ids_[size_t(j)]);
            v.parents.push_back(int32_t(j == 0 ? r : int64_t(v.rows.size()) - 2));
        }
    }
    return v;
}

TokenTree PpdProposer::guesses(std::span<const float> logits, int64_t first, int64_t n,
                               size_t V) const {
    return shape_.fill(ranked_candidates(logits, first, n, vocab_, V, shape_.width()));
}

TokenTree PpdProposer::guesses_after(const PpdVerify& verify, const Verdict& v,
                                     std::span<const float> logits, size_t V) const {
    const int64_t first = verify.chain_under(v);
    return first < 0 ? TokenTree{} : guesses(logits, first, chain_len_, V);
}

std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats,
                                  const model::VocabShortlist* shortlist, int tree_nodes,
                                  PpdCounts* counts, model::TpComm* tp) {
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    WEFT_CHECK(ppd.base.n_embd == cfg.n_embd && ppd.tokens > 0,
               "internal: {} prompt tokens of width {} for a model of width {}", ppd.tokens,
               ppd.base.n_embd, cfg.n_embd);
    model::check_prompt(cfg, prompt);
    const size_t V = model::sampled_vocab(cfg, o);
    const int64_t window = cfg.n_positions, vocab = cfg.vocab_size;
    const PpdProposer proposer(ppd, max_guesses, vocab, shortlist, tree_nodes);
    SpecSession s(cfg, layout, params, bf16, tp, prompt, o, on_token, stats, ppd.tokens);
    SpecText& text = s.text;
    TokenTree guesses;
    // With `counts`: each chain's candidates and the index in the output of the token before
    // the first they guess (the next verify's root), counted once the output is known.
    std::vector<std::pair<size_t, std::vector<std::vector<int32_t>>>> chains;
    auto guess = [&](std::span<const float> logits, int64_t first, int64_t n, size_t root) {
        if (first < 0) return TokenTree{};
        if (counts && n > 0)
            chains.emplace_back(root, ranked_candidates(logits, first, n, vocab, V, counts->width));
        return proposer.guesses(logits, first, n, V);
    };
    // The context, and when the window has room the prompt chain after it: the first token and
    // the first guesses.
    auto read_context = [&] {
        s.kv.release_all(s.table);
        s.batch.clear();
        proposer.attach(s.batch);
        const int64_t chain = proposer.add_context(s.batch, text.context, 0, s.table, window);
        s.kv.grow(s.table, int64_t(text.context.size()) + chain);
        const std::span<const float> logits = s.run();
        guesses = guess(logits, 1, chain, text.out.size());
        text.take(
            model::pick_token(logits.first(V), o, s.plain.uniform(uint64_t(text.out.size()))));
    };
    while (text.step(read_context)) {
        const int64_t pos = text.pos();
        // The guesses the window and the tokens still wanted leave room for.
        const PpdVerify verify = proposer.verify(
            text.context.back(), guesses, std::min(text.room(), int64_t(max_guesses)), pos, window);
        s.kv.grow(s.table, pos + int64_t(verify.rows.size()));
        s.batch.clear();
        proposer.attach(s.batch);
        s.batch.add_tree(verify.rows, verify.parents, pos, s.table);
        const std::span<const float> logits = s.run();
        auto row_logits = [&](int r) { return logits.subspan(size_t(r) * size_t(vocab), V); };
        const Verdict v = accept(verify.tree, row_logits, o, s.rng, s.counter);
        keep_accepted(s.kv, s.table, pos, v.nodes);
        s.st.count(verify.tree, v);
        // The chain under the last kept row read exactly the text kept: its guesses follow the
        // model's next token.
        guesses = guess(logits, verify.chain_under(v), proposer.chain_len(),
                        text.out.size() + v.nodes.size());
        text.take(verify.tree, v);
    }
    const std::vector<int32_t>& out = text.out;
    for (const auto& [root, ranked] : chains)
        if (root < out.size())
            counts->count(ranked, std::span<const int32_t>(out).subspan(root + 1));
    return s.finish();
}

void PpdMeasure::validate() const {
    WEFT_CHECK(prompts >= 1, "--prompts must be at least 1, got {}", prompts);
    WEFT_CHECK(prompt_tokens >= 1, "--prompt-tokens must be at least 1, got {}", prompt_tokens);
    WEFT_CHECK(tokens >= 2, "--tokens must be at least 2 (a guess follows the first), got {}",
               tokens);
    WEFT_CHECK(width >= 1, "--width must be at least 1, got {}", width);
}

PpdCounts measure_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                      const float* params, const PpdPrompts& ppd, std::span<const int32_t> text,
                      const PpdMeasure& m) {
    m.validate();
    const int64_t span = std::min(m.prompt_tokens, cfg.n_positions - 1);
    WEFT_CHECK(int64_t(text.size()) >= span + 1,
               "the held-out text has {} tokens, fewer than a prompt of {} and one more",
               text.size(), span);
    PpdCounts counts;
    counts.width = m.width;
    counts.hits.assign(size_t(ppd.tokens), std::vector<int64_t>(size_t(m.width), 0));
    counts.seen.assign(size_t(ppd.tokens), 0);
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = m.tokens;
    const int64_t last = int64_t(text.size()) - span;  // the prompts start in [0, last)
    for (int64_t i = 0; i < m.prompts; ++i) {
        const int64_t start = last * i / m.prompts;
        generate_ppd(cfg, layout, params, text.subspan(size_t(start), size_t(span)), o, ppd,
                     int(ppd.tokens), {}, m.bf16, nullptr, nullptr, 0, &counts);
    }
    return counts;
}

}  // namespace weft::decode
