#include "weft/decode/draft.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::decode {

Proposal Guesses::proposal() const {
    return [this](int node) -> const Distribution* {
        const size_t i = size_t(node + 1);
        return i < q.size() ? &q[i] : nullptr;
    };
}

void check_draft(const model::ModelConfig& target, const model::ModelConfig& draft) {
    WEFT_CHECK(draft.vocab_size == target.vocab_size,
               "the draft model's vocabulary has {} ids, the model's {} (expected a draft with "
               "the model's tokenizer and vocabulary)",
               draft.vocab_size, target.vocab_size);
}

namespace {

int64_t draft_blocks(const model::ModelConfig& cfg, int64_t kv_blocks) {
    return kv_blocks > 0 ? kv_blocks : (cfg.n_positions + 15) / 16;
}

}  // namespace

DraftModel::DraftModel(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                       const float* params, bool bf16, int64_t kv_blocks)
    : forward_(cfg, layout, params, bf16),
      kv_(draft_blocks(cfg, kv_blocks), cfg.n_layer, forward_.kv_width(), 16, forward_.kv_bf16()) {}

Guesses DraftModel::propose(DraftSeq& seq, std::span<const int32_t> context, int64_t k,
                            const model::SampleOptions& o, const Philox& rng, uint64_t& counter) {
    Guesses g;
    const int64_t n = int64_t(context.size());
    // The last guess is never read, so k guesses take positions up to n + k - 2.
    k = std::min(k, config().n_positions - n + 1);
    if (k <= 0 || n == 0) return g;
    if (!kv_.grow(seq.table, n + k - 1)) return g;
    // The cached positions whose tokens still stand, all but the root at most: its logits are
    // the first guess's.
    const auto diff =
        std::mismatch(seq.cached.begin(), seq.cached.end(), context.begin(), context.end());
    const int64_t keep = std::min<int64_t>(diff.first - seq.cached.begin(), n - 1);
    seq.cached.assign(context.begin(), context.end());
    batch_.clear();
    batch_.add(context.subspan(size_t(keep)), keep, seq.table, true);
    const size_t V = model::sampled_vocab(config(), o);
    for (int64_t i = 0;; ++i) {
        const std::span<const float> logits = forward_.run(batch_, kv_).first(V);
        int32_t t;
        if (o.temperature == 0) {
            t = model::pick_token(logits, o, 0);
        } else {
            g.q.push_back(sampling_distribution(logits, o));
            t = draw(g.q.back(), rng.uniform(counter++));
        }
        g.tree.add(int(i) - 1, t);
        if (i + 1 == k) return g;
        seq.cached.push_back(t);
        batch_.clear();
        batch_.add(std::span<const int32_t>(&t, 1), n + i, seq.table, true);
    }
}

void DraftModel::release(DraftSeq& seq) {
    kv_.release_all(seq.table);
    seq.cached.clear();
}

}  // namespace weft::decode
