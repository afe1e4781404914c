#pragma once
// Parallel Prompt Decoding (Chen et al. 2024, "Hardware-aware parallel prompt decoding"): k
// trained input embeddings (decode/ppd_file.hpp, trained by train/ppd_train.hpp) appended after
// a token guess the k tokens that follow the model's next one. Every verify forward carries,
// after its tree of guesses, a chain of the k prompt rows under each node of the tree: whichever
// prefix the verdict keeps, the chain under its last node has read exactly the kept text, so the
// same forward that verified this step's guesses made the next step's (one forward a step, no
// guess pass). The prompt rows come after the tree's and no tree row attends to them, so the
// verified logits and the output are plain decoding's (speculative.hpp).
//
// The guesses are a chain of each prompt row's argmax, or a sparse tree of their top candidates
// (decode/tree_shape.hpp) chosen from the acceptance rates measured on held-out text
// (measure_ppd, saved beside the prompts: decode/ppd_file.hpp).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weft/decode/ppd_file.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/decode/tree_shape.hpp"
#include "weft/model/row_batch.hpp"

namespace weft::decode {

// One verify's rows: the root, the tree of guesses, and under each row of that tree a chain of
// prompt rows while the window holds them.
struct PpdVerify {
    TokenTree tree;                      // the guesses verified
    std::vector<int32_t> rows, parents;  // for model::RowBatch::add_tree
    std::vector<int64_t> chain_row;      // per tree row: its prompt chain's first row, or -1
    // The first row of the prompt chain under the last row `v` kept, or -1.
    int64_t chain_under(const Verdict& v) const;
};

// How often each prompt's candidates were the model's own token (per depth and rank), which
// choose_tree takes as acceptance rates: generate_ppd counts them when given one.
struct PpdCounts {
    int width = 8;                           // candidates ranked a depth
    std::vector<std::vector<int64_t>> hits;  // [depth - 1][rank]
    std::vector<int64_t> seen;               // [depth - 1]: guesses whose token came
    Acceptance rates() const;                // hits / seen
    // Counts the candidates `ranked` (depth d + 1's in ranked[d]) against the tokens they
    // guessed, `truth[d]` (fewer when the text ended first).
    void count(const std::vector<std::vector<int32_t>>& ranked, std::span<const int32_t> truth);
};

// The pieces a generation loop (generate_ppd's, the serving engine's) runs with `ppd`'s prompt
// tokens for a model of vocabulary `vocab`, at most `max_guesses` (--spec-tokens) a step: a
// step uses only that many prompt rows, as the ones past them would guess for nothing.
class PpdProposer {
  public:
    // `shortlist`: the prompt rows' logits over its ids alone (null: the whole vocabulary).
    // `tree_nodes` above 0: the guesses are the sparse tree of that many nodes, at most
    // max_guesses deep, chosen from ppd.acceptance (default_acceptance when none was measured);
    // 0: a chain of max_guesses argmaxes.
    PpdProposer(const PpdPrompts& ppd, int max_guesses, int64_t vocab,
                const model::VocabShortlist* shortlist = nullptr, int tree_nodes = 0);
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
    // The verify of the root at `pos` and the guesses at most `room` deep.
    PpdVerify verify(int32_t root, const TokenTree& guesses, int64_t room, int64_t pos,
                     int64_t window) const;
    // The guesses of `n` prompt rows from `first` of `logits` (as ranked_candidates'): the next
    // step's, the tree's shape filled with their candidates.
    TokenTree guesses(std::span<const float> logits, int64_t first, int64_t n, size_t V) const;
    // The guesses the chain under the last row `v` kept made (none when it had no chain).
    TokenTree guesses_after(const PpdVerify& verify, const Verdict& v,
                            std::span<const float> logits, size_t V) const;
    const TreeShape& shape() const { return shape_; }

  private:
    const PpdPrompts& ppd_;
    const model::VocabShortlist* shortlist_;
    TreeShape shape_;
    int64_t chain_len_, vocab_;
    std::vector<int32_t> prompt_ids_;  // the rows' ids: vocab .. vocab + chain_len - 1
};

// generate_speculative for --spec ppd: the guesses are `ppd`'s, a chain of up to its k tokens
// and at most `max_guesses` (--spec-tokens: fewer guesses, fewer prompt chains, fewer rows), or
// with `tree_nodes` the sparse tree of that many (PpdProposer). `counts`: each prompt chain's
// candidates counted against the tokens that came (measure_ppd). Under `tp` every rank of the
// group runs it alike: the guesses come from the gathered logits, the same bits on each.
std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats,
                                  const model::VocabShortlist* shortlist = nullptr,
                                  int tree_nodes = 0, PpdCounts* counts = nullptr,
                                  model::TpComm* tp = nullptr);

// The acceptance rates of `ppd`'s prompts, for choose_tree: greedy decoding with a chain of all
// k prompts from `prompts` passages of `text` (held-out tokens, evenly spaced, `prompt_tokens`
// each), `tokens` generated after each, every chain's `width` best candidates counted against
// the tokens the model then chose.
struct PpdMeasure {
    int64_t prompts = 16, prompt_tokens = 64, tokens = 64;
    int width = 4;
    bool bf16 = false;
    // An error naming the bad value unless every count is at least 1.
    void validate() const;
};
PpdCounts measure_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                      const float* params, const PpdPrompts& ppd, std::span<const int32_t> text,
                      const PpdMeasure& m);

}  // namespace weft::decode
