#pragma once
// Parallel Prompt Decoding (Chen et al. 2024, "Hardware-aware parallel prompt decoding"): k
// trained input embeddings (decode/ppd_file.hpp, trained by train/ppd_train.hpp) appended after
// a token guess the k tokens that follow the model's next one. Every verify forward carries,
// after its tree of guesses, a chain of the k prompt rows under each node of the tree: whichever
// prefix the verdict keeps, the chain under its last node has read exactly the kept text, so the
// same forward that verified this step's guesses made the next step's (one forward a step, no
// guess pass). The prompt rows come after the tree's and no tree row attends to them, so the
// verified logits and the output are plain decoding's (speculative.hpp).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weft/decode/ppd_file.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::decode {

// One verify's rows: the root, the chain of guesses, and under each row of that chain a chain of
// prompt rows while the window holds them.
struct PpdVerify {
    TokenTree tree;                      // the guesses verified
    std::vector<int32_t> rows, parents;  // for model::RowBatch::add_tree
    std::vector<int64_t> chain_row;      // per tree row: its prompt chain's first row, or -1
};

// The pieces a generation loop (generate_ppd's, the serving engine's) runs with `ppd`'s prompt
// tokens for a model of vocabulary `vocab`, at most `max_guesses` (--spec-tokens) a step: a
// step uses only that many prompt rows, as the ones past them would guess for nothing.
class PpdProposer {
  public:
    // `shortlist`: the prompt rows' logits over its ids alone (null: the whole vocabulary).
    PpdProposer(const PpdPrompts& ppd, int max_guesses, int64_t vocab,
                const model::VocabShortlist* shortlist = nullptr);
    // Prompt rows a chain has.
    int64_t chain_len() const { return chain_len_; }
    // Prompt rows after a context of n tokens: a chain when `window` holds it, else none.
    int64_t chain_after(int64_t n, int64_t window) const {
        return n + chain_len_ <= window ? chain_len_ : 0;
    }
    // The batch's inputs past the vocabulary are the prompt embeddings (set after each clear).
    void attach(model::RowBatch& b) const;
    // Appends the run `t` at positions pos0.. ending a context of pos0 + t.size() tokens and,
    // when `window` holds them, the prompt chain after it; the logits wanted are the run's last
    // row's (the next token) and the chain's (the guesses after it). Returns the chain's rows.
    int64_t add_context(model::RowBatch& b, std::span<const int32_t> t, int64_t pos0,
                        const model::BlockTable& table, int64_t window) const;
    // The verify of the root at `pos` and at most `room` of `guesses`.
    PpdVerify verify(int32_t root, const TokenTree& guesses, int64_t room, int64_t pos,
                     int64_t window) const;
    // The argmaxes of `n` prompt rows from `first` of `logits` (rows `vocab` apart, the first V
    // ids sampled): the next step's guesses.
    TokenTree guesses(std::span<const float> logits, int64_t first, int64_t n, size_t V) const;
    // The guesses the chain under the last row `v` kept made (none when it had no chain).
    TokenTree guesses_after(const PpdVerify& verify, const Verdict& v,
                            std::span<const float> logits, size_t V) const;

  private:
    const PpdPrompts& ppd_;
    const model::VocabShortlist* shortlist_;
    int64_t chain_len_, vocab_;
    std::vector<int32_t> prompt_ids_;  // the rows' ids: vocab .. vocab + chain_len - 1
};

// generate_speculative for --spec ppd: the guesses are `ppd`'s, a chain of up to its k tokens
// and at most `max_guesses` (--spec-tokens: fewer guesses, fewer prompt chains, fewer rows).
std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats,
                                  const model::VocabShortlist* shortlist = nullptr);

}  // namespace weft::decode
