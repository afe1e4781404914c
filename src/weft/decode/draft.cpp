#include "weft/decode/draft.hpp"

#include <algorithm>
#include <utility>

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
      kv_(draft_blocks(cfg, kv_blocks), cfg.n_layer, forward_.kv_width(), cfg.head_dim(), 16,
          forward_.kv_bf16()) {}

Guesses DraftModel::propose(DraftSeq& seq, std::span<const int32_t> context, int64_t k,
                            const model::SampleOptions& o, const Philox& rng, uint64_t& counter) {
    DraftJob job{&seq, context, k, &o, &rng, &counter, {}};
    propose(std::span<DraftJob>(&job, 1));
    return std::move(job.out);
}

void DraftModel::clear_batch() {
    batch_.clear();
    batch_.shortlist = shortlist_;
    batch_.shortlist_all = true;
}

void DraftModel::propose(std::span<DraftJob> jobs) {
    // The first forward reads what each sequence's cache lacks (its root at least); each later
    // one the guess before, one row a sequence still guessing.
    clear_batch();
    std::vector<DraftJob*> live, next;
    for (DraftJob& j : jobs) {
        j.out = {};
        const int64_t n = int64_t(j.context.size());
        // The last guess is never read, so k guesses take positions up to n + k - 2.
        j.k = std::min(j.k, config().n_positions - n + 1);
        if (j.k <= 0 || n == 0) continue;
        if (!kv_.grow(j.seq->table, n + j.k - 1)) continue;
        // The cached positions whose tokens still stand, all but the root at most: its logits
        // are the first guess's.
        DraftSeq& seq = *j.seq;
        const auto diff =
            std::mismatch(seq.cached.begin(), seq.cached.end(), j.context.begin(), j.context.end());
        const int64_t keep = std::min<int64_t>(diff.first - seq.cached.begin(), n - 1);
        seq.cached.assign(j.context.begin(), j.context.end());
        batch_.add(j.context.subspan(size_t(keep)), keep, seq.table, true);
        live.push_back(&j);
    }
    const size_t vocab = size_t(config().vocab_size);
    // Greedy leaves beside the chain (set_width), added once the chain is whole so that chain
    // node i keeps index i: (parent, token) of each job's.
    std::vector<std::vector<std::pair<int, int32_t>>> leaves(jobs.size());
    for (int64_t i = 0; !live.empty(); ++i) {
        const std::span<const float> logits = forward_.run(batch_, kv_);
        ++forwards_;
        clear_batch();
        next.clear();
        for (size_t r = 0; r < live.size(); ++r) {
            DraftJob& j = *live[r];
            const model::SampleOptions& o = *j.o;
            const std::span<const float> l =
                logits.subspan(r * vocab, model::sampled_vocab(config(), o));
            int32_t t;
            if (o.temperature == 0) {
                t = model::pick_token(l, o, 0);
                const std::vector<std::vector<int32_t>> ranked =
                    width_ > 1 ? ranked_candidates(l, 0, 1, int64_t(l.size()), l.size(), width_)
                               : std::vector<std::vector<int32_t>>{};
                for (const std::vector<int32_t>& ids : ranked)
                    for (int32_t c : ids)
                        if (c != t) leaves[size_t(&j - jobs.data())].push_back({int(i) - 1, c});
            } else {
                j.out.q.push_back(sampling_distribution(l, o));
                t = draw(j.out.q.back(), j.rng->uniform((*j.counter)++));
            }
            j.out.tree.add(int(i) - 1, t);
            if (i + 1 == j.k) continue;
            j.seq->cached.push_back(t);
            batch_.add(std::span<const int32_t>(&t, 1), int64_t(j.context.size()) + i, j.seq->table,
                       true);
            next.push_back(&j);
        }
        live.swap(next);
    }
    for (size_t j = 0; j < jobs.size(); ++j)
        for (const auto& [parent, t] : leaves[j]) jobs[j].out.tree.add(parent, t);
}

void DraftModel::release(DraftSeq& seq) {
    kv_.release_all(seq.table);
    seq.cached.clear();
}

}  // namespace weft::decode
