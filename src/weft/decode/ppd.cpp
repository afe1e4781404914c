#include "weft/decode/ppd.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/model/kv_pool.hpp"

namespace weft::decode {

PpdProposer::PpdProposer(const PpdPrompts& ppd, int max_guesses, int64_t vocab,
                         const model::VocabShortlist* shortlist)
    : ppd_(ppd),
      shortlist_(shortlist),
      chain_len_(std::clamp<int64_t>(max_guesses, 0, ppd.tokens)),
      vocab_(vocab) {
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
    v.tree = TokenTree::chain(std::span<const int32_t>(guesses.tokens)
                                  .first(size_t(std::clamp<int64_t>(room, 0, guesses.size()))));
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
    std::vector<int32_t> guess;
    for (int64_t j = 0; j < n; ++j) {
        const float* l = logits.data() + (first + j) * vocab_;
        guess.push_back(int32_t(std::max_element(l, l + V) - l));
    }
    return TokenTree::chain(guess);
}

TokenTree PpdProposer::guesses_after(const PpdVerify& verify, const Verdict& v,
                                     std::span<const float> logits, size_t V) const {
    const int64_t first = verify.chain_row[v.nodes.size()];
    return first < 0 ? TokenTree{} : guesses(logits, first, chain_len_, V);
}

std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats,
                                  const model::VocabShortlist* shortlist) {
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    WEFT_CHECK(ppd.base.n_embd == cfg.n_embd && ppd.tokens > 0,
               "internal: {} prompt tokens of width {} for a model of width {}", ppd.tokens,
               ppd.base.n_embd, cfg.n_embd);
    model::check_prompt(cfg, prompt);
    const size_t V = model::sampled_vocab(cfg, o);
    const int64_t window = cfg.n_positions, vocab = cfg.vocab_size;
    const PpdProposer proposer(ppd, max_guesses, vocab, shortlist);
    SpecSession s(cfg, layout, params, bf16, nullptr, prompt, o, on_token, stats, ppd.tokens);
    SpecText& text = s.text;
    TokenTree guesses;
    // The context, and when the window has room the prompt chain after it: the first token and
    // the first guesses.
    auto read_context = [&] {
        s.kv.release_all(s.table);
        s.batch.clear();
        proposer.attach(s.batch);
        const int64_t chain = proposer.add_context(s.batch, text.context, 0, s.table, window);
        s.kv.grow(s.table, int64_t(text.context.size()) + chain);
        const std::span<const float> logits = s.run();
        guesses = proposer.guesses(logits, 1, chain, V);
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
        keep_accepted(s.kv, s.table, cfg.n_layer, pos, v.nodes);
        s.st.count(verify.tree, v);
        // The chain under the last kept row read exactly the text kept: its guesses follow the
        // model's next token.
        guesses = proposer.guesses_after(verify, v, logits, V);
        text.take(verify.tree, v);
    }
    return s.finish();
}

}  // namespace weft::decode
