#pragma once
// Generation that guesses several tokens a step and verifies them in one forward (issue #34,
// docs/decoding.md): a proposer makes a tree of guessed tokens after the last chosen one, one
// forward runs the tree's rows (each sees the context and its own path: RowSeq::parents), and
// accept.hpp's rules keep the guesses the model would have made itself. Greedy gives plain
// greedy's tokens bit for bit (the row-invariant forward gives a verified row the logits a
// one-token step would); sampling gives tokens distributed as plain sampling's.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/core/philox.hpp"
#include "weft/decode/accept.hpp"
#include "weft/decode/draft.hpp"
#include "weft/decode/ngram.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/vocab_shortlist.hpp"

namespace weft::decode {

struct PpdPrompts;

struct SpecOptions {
    std::string kind = "none";    // none | ngram | draft | ppd
    NgramOptions ngram;           // its max_tokens: the most guesses of any proposer (guesses())
    std::filesystem::path draft;  // --spec draft: the draft model (decode/draft.hpp)
    // --spec ppd: the trained prompt tokens' checkpoint (--ppd), and what it holds once loaded
    // (decode/ppd_file.hpp), which generate_speculative needs.
    std::filesystem::path ppd_file;
    std::shared_ptr<const PpdPrompts> ppd;
    // --spec-tree N: --spec ppd guesses a sparse tree of N nodes (decode/tree_shape.hpp) chosen
    // from the prompts' measured acceptance, at most --spec-tokens deep; 0: a chain.
    int tree = 0;
    // --draft-width W: at temperature 0 the draft's W best ids at each depth, its best the
    // chain and the others leaves beside it (DraftModel::set_width).
    int draft_width = 1;
    // --spec-vocab N --spec-vocab-from FILE: the draft's rows and the prompt rows propose from
    // the N ids most frequent in FILE (model/vocab_shortlist.hpp); 0: the whole vocabulary.
    int64_t vocab = 4096;
    std::filesystem::path vocab_from;
    std::shared_ptr<const model::VocabShortlist> shortlist;

    // An error naming --spec unless it is none, ngram, draft (which needs --draft, and only it)
    // or ppd (which needs --ppd, and only it), --spec-tree (ppd's, 0 or more), and the n-gram
    // settings.
    void validate() const;
    // The most tokens guessed a step: --spec-tokens, or when it is 0 the proposer's default, chosen
    // from the measured cost of a verify's rows and the guesses kept (docs/decoding.md, "How
    // many guesses"): ngram 5; draft 1, or 3 when it proposes over a shortlist (its forwards then
    // cost little); ppd 1, or all its prompts under a --spec-tree.
    int guesses() const;
};

// What speculation did: forwards of the model, tokens generated, tokens guessed and accepted
// (per depth of the guess: of the guessed_at[d] verifies that guessed that deep, accepted_at[d]
// kept a guess there).
struct SpecStats {
    int64_t forwards = 0, tokens = 0, guessed = 0, accepted = 0;
    std::vector<int64_t> guessed_at, accepted_at;
    // Tokens a forward (tau).
    double tokens_per_forward() const { return forwards ? double(tokens) / double(forwards) : 0; }
    // Counts one verify: the tree's guesses, and those the verdict kept, by depth.
    void count(const TokenTree& tree, const Verdict& v);
};

// The pieces a generation loop (this file's, the serving engine's) runs each step:
// - the guesses after `context` (whose last token is the root), at most `room` of them;
TokenTree propose(const SpecOptions& spec, std::span<const int32_t> context, int64_t room);
// - the verify's rows, the root then the nodes, with their parents among the rows
//   (model::RowBatch::add_tree);
void tree_rows(int32_t root, const TokenTree& tree, std::vector<int32_t>& rows,
               std::vector<int32_t>& parents);
// - the verdict: greedy at temperature 0, else sampling with the guesses as fixed points, or as
//   drawn from `proposal`'s distributions (a draft's);
Verdict accept(const TokenTree& tree, const RowLogits& logits, const model::SampleOptions& o,
               const Philox& rng, uint64_t& counter, const Proposal& proposal = {});
// - the accepted nodes' keys and values moved from their verify slots (root position + 1 +
//   node) to their positions (root position + depth): nothing to move for a chain. With
//   `moved`, each move's pool slots are appended to it, from then to (model::RowBatch::kv_moves).
void keep_accepted(model::KvPool& kv, const model::BlockTable& table, int64_t root_pos,
                   const std::vector<int>& nodes, std::vector<int64_t>* moved = nullptr);

// The text a speculative generation makes (generate_speculative's loop, generate_ppd's): the
// context in the model's window, the tokens generated, and whether the end of text came.
struct SpecText {
    SpecText(std::span<const int32_t> prompt, int64_t window, const model::SampleOptions& o,
             const std::function<void(int32_t)>& on_token);
    // Takes `t` unless it ends the text; false when it does.
    bool take(int32_t t);
    // A verdict's tokens: the kept guesses, then the model's own next one.
    void take(const TokenTree& tree, const Verdict& v);
    bool going() const { return !stopped && int64_t(out.size()) < o.tokens; }
    // The loop head of a generation: true while a verify is due, having first called
    // `read_context` (which reads the whole context and takes the next token from its last row)
    // at the start and whenever the window slid.
    bool step(const std::function<void()>& read_context);
    // The root's position: the last chosen token's, not yet read.
    int64_t pos() const { return int64_t(context.size()) - 1; }
    // When the window is full, keeps its last half as model::generate does, and says so (the
    // context must then be read again).
    bool slide();
    // The guesses the window and the tokens still wanted leave room for after the root.
    int64_t room() const;

    std::vector<int32_t> context, out;
    bool stopped = false;
    bool context_read = false;  // once at the start; step() reads it again after a slide
    int64_t window;
    const model::SampleOptions& o;
    const std::function<void(int32_t)>& on_token;
};

// What a speculative generation loop (generate_speculative's, generate_ppd's) holds: the model's
// row forward over a KV pool of one window, the batch, the text, the two streams of uniform
// numbers, and the stats (by guess depth up to `depth`).
struct SpecSession {
    SpecSession(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                const float* params, bool bf16, model::TpComm* tp, std::span<const int32_t> prompt,
                const model::SampleOptions& o, const std::function<void(int32_t)>& on_token,
                SpecStats* stats, int64_t depth);
    // Runs the batch, counting the forward.
    std::span<const float> run();
    // The tokens generated, once the loop is done (counted in the stats).
    std::vector<int32_t> finish();

    SpecStats local;
    SpecStats& st;
    model::RowForward forward;
    model::KvPool kv;
    model::BlockTable table;
    model::RowBatch batch;
    SpecText text;
    // As model::generate: the first token (read_context's, after the prompt) is drawn from the
    // plain sampling stream, as the serving engine does after a prompt; every verdict's from
    // speculation's, at `counter`.
    const Philox plain, rng;
    uint64_t counter = 0;
};

// model::generate with the guesses of `spec`: the same tokens under greedy decoding; the same
// distribution when sampling. `draft`: the model of --spec draft (its vocabulary checked). `tp`:
// as model::generate's, with no draft.
std::vector<int32_t> generate_speculative(const model::ModelConfig& cfg,
                                          const model::ParamLayout& layout, const float* params,
                                          std::span<const int32_t> prompt,
                                          const model::SampleOptions& o, const SpecOptions& spec,
                                          const std::function<void(int32_t)>& on_token = {},
                                          bool bf16 = false, SpecStats* stats = nullptr,
                                          DraftModel* draft = nullptr, model::TpComm* tp = nullptr);

}  // namespace weft::decode
