#pragma once
// Draft-model speculation (Leviathan et al. 2023, Chen et al. 2023): a smaller model with the
// target's vocabulary guesses the next tokens one at a time, greedy at temperature 0, else each
// drawn from its own distribution q, which accept_sampling then takes as the proposal, so that
// the output is still the target's to the bit (greedy) or in law (sampling).
//
// The draft keeps its own KV cache of the text. Its keys at a position depend only on the tokens
// up to there, so after a verify nothing is undone: the next proposal keeps the cached positions
// whose tokens still stand (the context and the accepted guesses) and reads only the rest, the
// target's own token and at most one accepted guess the draft never read.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/core/philox.hpp"
#include "weft/decode/accept.hpp"
#include "weft/decode/token_tree.hpp"
#include "weft/decode/tree_shape.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"

namespace weft::decode {

// One sequence's place in the draft's cache: its blocks and the tokens of positions 0.. there.
struct DraftSeq {
    model::BlockTable table;
    std::vector<int32_t> cached;
};

// Guessed tokens and, when a draft sampled them, the distribution each was drawn from (none:
// fixed guesses, as prompt lookup's).
struct Guesses {
    TokenTree tree;
    std::vector<Distribution> q;  // q[i]: node i's, drawn under node i - 1 (the root for 0)
    // accept_sampling's proposal: q of the child under `node`, null past the last.
    Proposal proposal() const;
};

// One sequence's proposal in a batch of them (DraftModel::propose): propose()'s arguments, whose
// pointers must outlive the call, and its guesses.
struct DraftJob {
    DraftSeq* seq;
    std::span<const int32_t> context;
    int64_t k;
    const model::SampleOptions* o;
    const Philox* rng;
    uint64_t* counter;
    Guesses out;
};

// An error naming both sizes unless the draft's vocabulary is the target's: the guesses are ids.
void check_draft(const model::ModelConfig& target, const model::ModelConfig& draft);

class DraftModel {
  public:
    // Its cache holds `kv_blocks` blocks of 16 positions shared by every sequence (0: one
    // sequence's whole context).
    DraftModel(const model::ModelConfig& cfg, const model::ParamLayout& layout, const float* params,
               bool bf16, int64_t kv_blocks = 0);

    // Up to `k` guesses after `context`, its last token the root, under o's temperature, top-k,
    // top-p and vocabulary; a draw takes the uniform number at `counter` of `rng` and advances
    // it. Fewer near the end of the draft's context, none when its cache has no room.
    Guesses propose(DraftSeq& seq, std::span<const int32_t> context, int64_t k,
                    const model::SampleOptions& o, const Philox& rng, uint64_t& counter);
    // The same for several sequences at once (the serving engine's requests), their rows in one
    // forward per guess depth: the draft's weights are read once a depth for all of them, and
    // each sequence's guesses are the bits propose() gives it alone (row-invariant forward).
    void propose(std::span<DraftJob> jobs);
    // Gives the sequence's blocks back.
    void release(DraftSeq& seq);
    const model::ModelConfig& config() const { return forward_.config(); }
    // Its guesses from the ids of `s` alone (null: the whole vocabulary), which must outlive
    // it: each draft row's head then reads the shortlist's rows of the weight, not all of them,
    // and q is the draft's distribution restricted to the shortlist, which the guesses are
    // drawn from and the acceptance rule takes.
    void set_shortlist(const model::VocabShortlist* s) { shortlist_ = s; }
    // At temperature 0, the draft's `w` best ids at each depth (ranked_candidates): the best
    // continues the chain, the others are leaves beside it, verified in the same forward, where
    // one stands when it is the model's argmax and the chain guess is not. Sampling guesses a
    // chain whatever `w`: a drawn guess must be its node's only child (accept_sampling).
    void set_width(int w) { width_ = w; }
    // The draft's forwards so far.
    int64_t forwards() const { return forwards_; }

  private:
    model::RowForward forward_;
    model::KvPool kv_;
    model::RowBatch batch_;
    int64_t forwards_ = 0;
    const model::VocabShortlist* shortlist_ = nullptr;
    int width_ = 1;
    void clear_batch();
};

}  // namespace weft::decode
