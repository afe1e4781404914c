#include "weft/decode/speculative.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/decode/accept.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::decode {

void SpecOptions::validate() const {
    WEFT_CHECK(kind == "none" || kind == "ngram", "--spec must be none or ngram, got '{}'", kind);
    ngram.validate();
}

namespace {

// Moves the keys and values of the accepted nodes from their verify slots (the root's position
// + 1 + node index) to their positions (the root's + depth). A chain's slots are its positions.
void keep_path(model::KvPool& kv, const model::BlockTable& table, int64_t n_layer, int64_t pos,
               const std::vector<int>& nodes) {
    for (size_t d = 0; d < nodes.size(); ++d) {
        const int64_t from = pos + 1 + nodes[d], to = pos + 1 + int64_t(d);
        if (from == to) continue;
        for (int64_t l = 0; l < n_layer; ++l) {
            std::copy_n(kv.k(table, int(l), from), kv.width(), kv.k(table, int(l), to));
            std::copy_n(kv.v(table, int(l), from), kv.width(), kv.v(table, int(l), to));
        }
    }
}

}  // namespace

std::vector<int32_t> generate_speculative(const model::ModelConfig& cfg,
                                          const model::ParamLayout& layout, const float* params,
                                          std::span<const int32_t> prompt,
                                          const model::SampleOptions& o, const SpecOptions& spec,
                                          const std::function<void(int32_t)>& on_token, bool bf16,
                                          SpecStats* stats) {
    o.validate();
    spec.validate();
    if (spec.kind == "none") return model::generate(cfg, layout, params, prompt, o, on_token, bf16);
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    model::check_prompt(cfg, prompt);
    const size_t V = model::sampled_vocab(cfg, o);
    const int64_t window = cfg.n_positions;
    SpecStats local;
    SpecStats& st = stats ? *stats : local;
    st.guessed_at.assign(size_t(spec.ngram.max_tokens), 0);
    st.accepted_at.assign(size_t(spec.ngram.max_tokens), 0);

    model::RowForward forward(cfg, layout, params, bf16);
    model::KvPool kv((window + 15) / 16, cfg.n_layer, forward.kv_width());
    model::BlockTable table;
    model::RowBatch batch;
    std::vector<int32_t> context(prompt.begin(), prompt.end());
    if (int64_t(context.size()) > window) context.erase(context.begin(), context.end() - window);

    // The context's last token is the root of every verify: its row's logits choose the next.
    // Until then the positions before it are in the cache (`pos` of them).
    int64_t pos = 0;
    auto prefill = [&] {
        kv.release_all(table);
        pos = int64_t(context.size()) - 1;
        if (pos > 0) {
            kv.grow(table, pos);
            batch.clear();
            batch.add(std::span<const int32_t>(context.data(), size_t(pos)), 0, table, false);
            forward.run(batch, kv);
            ++st.forwards;
        }
    };
    prefill();
    const Philox rng = philox_for(o.seed, "speculative");
    uint64_t counter = 0;
    std::vector<int32_t> out;
    std::vector<int32_t> rows, parents;
    while (int64_t(out.size()) < o.tokens) {
        if (pos >= window) {
            // The window is full: keep its last half, as model::generate does.
            context.erase(context.begin(), context.end() - window / 2);
            prefill();
        }
        // At most the guesses the window and the tokens still wanted leave room for.
        NgramOptions no = spec.ngram;
        no.max_tokens = int(std::min<int64_t>(
            {no.max_tokens, window - pos - 1, o.tokens - int64_t(out.size()) - 1}));
        TokenTree tree = no.max_tokens > 0 ? propose_ngram(context, no) : TokenTree{};
        rows.assign(1, context.back());
        parents.assign(1, -1);
        for (int i = 0; i < tree.size(); ++i) {
            rows.push_back(tree.tokens[size_t(i)]);
            parents.push_back(tree.parents[size_t(i)] + 1);
        }
        kv.grow(table, pos + int64_t(rows.size()));
        batch.clear();
        batch.add_tree(rows, parents, pos, table);
        const std::span<const float> logits = forward.run(batch, kv);
        ++st.forwards;
        auto row_logits = [&](int r) {
            return logits.subspan(size_t(r) * size_t(cfg.vocab_size), V);
        };
        const Verdict v = o.temperature == 0
                              ? accept_greedy(tree, row_logits)
                              : accept_sampling(tree, row_logits, o, {}, rng, counter);
        keep_path(kv, table, cfg.n_layer, pos, v.nodes);
        st.guessed += tree.size();
        st.accepted += int64_t(v.nodes.size());
        for (int i = 0; i < tree.size(); ++i) ++st.guessed_at[size_t(tree.depth(i) - 1)];
        for (size_t d = 0; d < v.nodes.size(); ++d) ++st.accepted_at[d];
        // The accepted guesses, then the model's own next token.
        std::vector<int32_t> chosen;
        for (int n : v.nodes) chosen.push_back(tree.tokens[size_t(n)]);
        chosen.push_back(v.next);
        pos += 1 + int64_t(v.nodes.size());
        for (int32_t t : chosen) {
            if (t == o.stop_token || int64_t(out.size()) == o.tokens) {
                st.tokens = int64_t(out.size());
                return out;
            }
            out.push_back(t);
            context.push_back(t);
            if (on_token) on_token(t);
        }
        // The rows after the accepted path are stale; the next verify writes over them.
        pos = int64_t(context.size()) - 1;
    }
    st.tokens = int64_t(out.size());
    return out;
}

}  // namespace weft::decode
