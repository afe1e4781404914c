#include "weft/decode/ppd.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::decode {

namespace {

// The argmax of each prompt row under a kept node: the next step's guesses.
TokenTree prompt_guesses(std::span<const float> logits, int64_t first_row, int64_t n, int64_t vocab,
                         size_t V) {
    std::vector<int32_t> guess;
    for (int64_t j = 0; j < n; ++j) {
        const float* l = logits.data() + (first_row + j) * vocab;
        guess.push_back(int32_t(std::max_element(l, l + V) - l));
    }
    return TokenTree::chain(guess);
}

}  // namespace

std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats) {
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    WEFT_CHECK(ppd.base.n_embd == cfg.n_embd && ppd.tokens > 0,
               "internal: {} prompt tokens of width {} for a model of width {}", ppd.tokens,
               ppd.base.n_embd, cfg.n_embd);
    model::check_prompt(cfg, prompt);
    const size_t V = model::sampled_vocab(cfg, o);
    const int64_t window = cfg.n_positions, k = ppd.tokens, vocab = cfg.vocab_size;
    // A step uses at most max_guesses guesses: the prompt rows past them would guess for nothing.
    const int64_t chain_len = std::clamp<int64_t>(max_guesses, 0, k);
    SpecStats local;
    SpecStats& st = stats ? *stats : local;
    st.guessed_at.assign(size_t(k), 0);
    st.accepted_at.assign(size_t(k), 0);

    model::RowForward forward(cfg, layout, params, bf16);
    model::KvPool kv((window + 15) / 16, cfg.n_layer, forward.kv_width(), 16, forward.kv_bf16());
    model::BlockTable table;
    model::RowBatch batch;
    SpecText text(prompt, window, o, on_token);
    std::vector<int32_t> prompt_ids;
    for (int64_t j = 0; j < k; ++j) prompt_ids.push_back(int32_t(vocab + j));

    // As generate_speculative: the first token from the plain stream, every later one from
    // speculation's.
    const Philox plain = philox_for(o.seed, "sample"), rng = philox_for(o.seed, "speculative");
    uint64_t counter = 0;
    TokenTree guesses;
    auto begin_batch = [&] {
        batch.clear();
        batch.extra = ppd.embeddings.data();
        batch.extra_count = k;
    };
    // The context, and when the window has room the prompt chain after it: the first token and
    // the first guesses.
    auto read_context = [&] {
        const int64_t n = int64_t(text.context.size()),
                      chain = n + chain_len <= window ? chain_len : 0;
        kv.release_all(table);
        kv.grow(table, n + chain);
        begin_batch();
        std::vector<int32_t> ids = text.context;
        ids.insert(ids.end(), prompt_ids.begin(), prompt_ids.begin() + chain);
        batch.add(ids, 0, table, false);
        for (int64_t r = n - 1; r < n + chain; ++r) batch.logit_rows.push_back(r);
        const std::span<const float> logits = forward.run(batch, kv);
        ++st.forwards;
        guesses = prompt_guesses(logits, 1, chain, vocab, V);
        text.take(model::pick_token(logits.first(V), o, plain.uniform(uint64_t(text.out.size()))));
    };
    std::vector<int32_t> rows, parents;
    std::vector<int64_t> chain_row;  // per tree row: its prompt chain's first row, or -1
    while (text.step(read_context)) {
        const int64_t pos = text.pos();
        // The guesses the window and the tokens still wanted leave room for; then a prompt
        // chain under each row of the tree while the window holds its rows.
        const int64_t room = std::min(text.room(), int64_t(max_guesses));
        const TokenTree tree =
            TokenTree::chain(std::span<const int32_t>(guesses.tokens)
                                 .first(size_t(std::clamp<int64_t>(room, 0, guesses.size()))));
        tree_rows(text.context.back(), tree, rows, parents);
        const int64_t tree_n = int64_t(rows.size());
        chain_row.assign(size_t(tree_n), -1);
        for (int64_t r = 0; r < tree_n; ++r) {
            if (chain_len == 0 || pos + int64_t(rows.size()) + chain_len > window) break;
            chain_row[size_t(r)] = int64_t(rows.size());
            for (int64_t j = 0; j < chain_len; ++j) {
                rows.push_back(prompt_ids[size_t(j)]);
                parents.push_back(int32_t(j == 0 ? r : int64_t(rows.size()) - 2));
            }
        }
        kv.grow(table, pos + int64_t(rows.size()));
        begin_batch();
        batch.add_tree(rows, parents, pos, table);
        const std::span<const float> logits = forward.run(batch, kv);
        ++st.forwards;
        auto row_logits = [&](int r) { return logits.subspan(size_t(r) * size_t(vocab), V); };
        const Verdict v = accept(tree, row_logits, o, rng, counter);
        keep_accepted(kv, table, cfg.n_layer, pos, v.nodes);
        st.count(tree, v);
        // The chain under the last kept row read exactly the text kept: its guesses follow the
        // model's next token.
        const int64_t kept_row = int64_t(v.nodes.size());
        const int64_t first = chain_row[size_t(kept_row)];
        guesses = first < 0 ? TokenTree{} : prompt_guesses(logits, first, chain_len, vocab, V);
        text.take(tree, v);
    }
    st.tokens = int64_t(text.out.size());
    return text.out;
}

}  // namespace weft::decode
