#include "weft/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/kernels/chunk_team.hpp"
#include "weft/serve/stop_text.hpp"

namespace weft::serve {

namespace {

// The random stream `name` of a request's choice: choice 0's is `weft sample`'s.
Philox choice_stream(const Request& r, std::string_view name) {
    return philox_for(
        r.o.seed, r.choice == 0 ? std::string(name) : fmt::format("{} choice {}", name, r.choice));
}

}  // namespace

struct Engine::Running {
    Running(Request req_, std::shared_ptr<Stream> out_, size_t index_)
        : req(std::move(req_)),
          out(std::move(out_)),
          index(index_),
          tokens(req.prompt),
          rng(choice_stream(req, "sample")),
          spec_rng(choice_stream(req, "speculative")),
          draft_rng(choice_stream(req, "draft")),
          text(req.stop),
          json(req.json_schema.get()) {
        if (req.repetition_penalty != 1) {
            prompt_ids = req.prompt;
            std::sort(prompt_ids.begin(), prompt_ids.end());
            prompt_ids.erase(std::unique(prompt_ids.begin(), prompt_ids.end()), prompt_ids.end());
        }
    }

    Request req;
    std::shared_ptr<Stream> out;   // shared by the choices of one submission
    size_t index;                  // its choice's place in `out`
    int64_t scored = 1;            // prompt_logprobs: the next prompt token to score
    model::BlockTable table;       // empty while waiting
    std::vector<uint64_t> hashes;  // of its first full blocks (prefix caching), in order
    std::vector<int32_t> tokens;   // the prompt, then what was generated
    int64_t computed = 0;          // positions in the cache
    Philox rng;                    // as `weft sample`'s: token i draws its uniform number i
    Philox spec_rng;               // speculation's, as weft sample --spec's
    uint64_t spec_counter = 0;
    decode::DraftSeq draft;         // its place in the draft's cache (--spec draft)
    decode::TokenTree ppd_guesses;  // --spec ppd: its prompt rows' guesses for the next verify
    Philox draft_rng;               // the draft's draws, as weft sample --spec draft's
    uint64_t draft_counter = 0;
    StopText text;
    JsonPrefix json;  // JSON mode: what it generated, read as the start of an object
    // The prompt's ids, sorted, each once (for repetition_penalty).
    std::vector<int32_t> prompt_ids;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();  // submitted
    bool ended = false;  // its last update, with a finish reason, was pushed

    int64_t prompt_size() const { return int64_t(req.prompt.size()); }
    int64_t generated() const { return int64_t(tokens.size()) - prompt_size(); }
    // Prompt tokens still to score (none unless req.prompt_logprobs).
    bool scoring() const { return req.prompt_logprobs && scored < prompt_size(); }
    void push(const Update& u) { out->push(index, u); }
};

int64_t kv_blocks_in(double gib, int64_t n_layer, int64_t kv_width, int64_t block_tokens,
                     bool bf16) {
    const double block_bytes =
        2.0 * double(n_layer * kv_width * block_tokens) * (bf16 ? sizeof(uint16_t) : sizeof(float));
    return int64_t(gib * double(int64_t(1) << 30) / block_bytes);
}

void EngineOptions::validate() const {
    WEFT_CHECK(slots >= 1, "--slots must be at least 1, got {}", slots);
    WEFT_CHECK(batch_tokens >= 1, "--batch-tokens must be at least 1, got {}", batch_tokens);
    spec.validate();
}

namespace {

// The pool's blocks, checked before the pool is made.
int64_t pool_blocks(const EngineOptions& o) {
    o.validate();
    WEFT_CHECK(o.kv_blocks >= 1,
               "the KV cache pool holds no block of {} positions (expected a larger "
               "--kv-cache-gib)",
               o.block_tokens);
    return o.kv_blocks;
}

}  // namespace

Engine::Engine(const model::ModelConfig& cfg, const model::ParamLayout& layout, const float* params,
               std::function<std::string(int32_t)> piece, EngineOptions o,
               std::unique_ptr<decode::DraftModel> draft, EngineTp tp)
    : forward_(cfg, layout, params, o.bf16, tp.comm),
      pool_(pool_blocks(o), cfg.n_layer, forward_.kv_width(), cfg.head_dim(), o.block_tokens,
            o.bf16),
      draft_(std::move(draft)),
      piece_(std::move(piece)),
      o_(o),
      tp_(std::move(tp)) {
    WEFT_CHECK((o_.spec.kind == "draft") == (draft_ != nullptr),
               "internal: --spec {} with{} a draft model", o_.spec.kind, draft_ ? "" : "out");
    if (draft_) {
        decode::check_draft(cfg, draft_->config());
        draft_->set_shortlist(o_.spec.shortlist.get());
        draft_->set_width(o_.spec.draft_width);
    }
    if (o_.spec.kind == "ppd") {
        const decode::PpdPrompts* p = o_.spec.ppd.get();
        WEFT_CHECK(p && p->base.n_embd == cfg.n_embd && !(tp_.comm && o_.spec.shortlist),
                   "internal: --spec ppd without its prompt tokens for this model, or with a "
                   "shortlist under tp");
        ppd_.emplace(*p, o_.spec.guesses(), cfg.vocab_size, o_.spec.shortlist.get(), o_.spec.tree);
    }
    stats_.kv_blocks_total = o_.kv_blocks;
}

Engine::~Engine() = default;

double Engine::warm_up() {
    const auto t0 = std::chrono::steady_clock::now();
    model::BlockTable table;
    WEFT_CHECK(pool_.grow(table, 1), "internal: no KV block free for the warm-up forward");
    const int32_t token = 0;
    batch_.clear();
    batch_.add(std::span<const int32_t>(&token, 1), 0, table, true);
    if (tp_.announce) tp_.announce(batch_);
    forward_.run(batch_, pool_);
    batch_.clear();
    pool_.release_all(table);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Engine::check(const Request& r) const {
    const model::ModelConfig& cfg = config();
    r.o.validate();
    WEFT_CHECK(!r.prompt.empty(), "the prompt is empty (expected at least one token)");
    // None, to score a prompt only (the legacy API's echo with max_tokens 0).
    WEFT_CHECK(r.o.tokens >= 1 || (r.o.tokens == 0 && r.prompt_logprobs),
               "max_tokens must be at least 1 (0 only to score the prompt), got {}", r.o.tokens);
    for (auto [name, v] : {std::pair{"frequency_penalty", r.frequency_penalty},
                           std::pair{"presence_penalty", r.presence_penalty}})
        WEFT_CHECK(v >= -2 && v <= 2, "{} must be in [-2, 2], got {}", name, v);
    WEFT_CHECK(r.repetition_penalty > 0 && std::isfinite(r.repetition_penalty),
               "repetition_penalty must be a positive number, got {}", r.repetition_penalty);
    for (auto [id, bias] : r.logit_bias)
        WEFT_CHECK(id >= 0 && id < cfg.vocab_size && bias >= -100 && bias <= 100,
                   "logit_bias {}: {} is outside ids [0, {}) or biases [-100, 100]", id, bias,
                   cfg.vocab_size);
    WEFT_CHECK(r.json_object || !r.json_schema, "internal: a JSON schema without JSON mode");
    WEFT_CHECK(!r.json_object || json_vocab().spells_every_byte(),
               "JSON mode needs a vocabulary with a token for every byte (byte-level BPE, or "
               "byte fallback), so that any text the mask allows can be written; this one has "
               "none for some bytes");
    WEFT_CHECK(!r.json_object || r.o.stop_token >= 0,
               "JSON mode needs the end of text token to end the object (got none: ignore_eos)");
    WEFT_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= Request::kMaxTopLogprobs,
               "top_logprobs must be in [0, {}], got {}", Request::kMaxTopLogprobs, r.top_logprobs);
    model::check_prompt(cfg, r.prompt);
    const int64_t positions = int64_t(r.prompt.size()) + r.o.tokens;
    WEFT_CHECK(positions <= cfg.n_positions,
               "the prompt's {} tokens and max_tokens {} make {} positions, past the model's "
               "context of {} (expected prompt tokens + max_tokens <= {})",
               r.prompt.size(), r.o.tokens, positions, cfg.n_positions, cfg.n_positions);
    const int64_t blocks = (positions_for(r) + o_.block_tokens - 1) / o_.block_tokens;
    WEFT_CHECK(blocks <= o_.kv_blocks,
               "the request needs {} KV cache blocks of {} positions, more than the pool's {} "
               "(expected a larger --kv-cache-gib, or fewer tokens)",
               blocks, o_.block_tokens, o_.kv_blocks);
}

const JsonVocab& Engine::json_vocab() const {
    std::call_once(json_once_, [&] {
        // The ids the tokenizer has; a padded embedding's others are never offered.
        std::vector<std::string> pieces(size_t(config().vocab_size));
        for (size_t t = 0; t < pieces.size(); ++t) {
            try {
                pieces[t] = piece_(int32_t(t));
            } catch (const Error&) {
            }
        }
        json_vocab_ = std::make_unique<JsonVocab>(std::move(pieces));
    });
    return *json_vocab_;
}

int64_t Engine::positions_for(const Request& r) const {
    const int64_t text = int64_t(r.prompt.size()) + r.o.tokens;
    if (!ppd_) return text;
    // A verify's root sits before position text - 1 and its rows take the slots after it,
    // within the context (PpdProposer::verify): the root and each of the N guesses of its tree
    // (a chain: N = M) with a chain of M prompt rows under it, (N + 1)(M + 1) rows.
    const int64_t m = ppd_->chain_len(), n = ppd_->shape().size();
    return std::min(config().n_positions, text + (n + 1) * (m + 1) - 1);
}

std::shared_ptr<Stream> Engine::submit(Request r) {
    std::vector<Request> one;
    one.push_back(std::move(r));
    return submit(std::move(one));
}

std::shared_ptr<Stream> Engine::submit(std::vector<Request> choices) {
    WEFT_CHECK(!choices.empty(), "internal: a submission of no request");
    for (const Request& r : choices) check(r);
    auto out = std::make_shared<Stream>(choices.size());
    {
        std::lock_guard lock(mu_);
        for (size_t c = 0; c < choices.size(); ++c)
            waiting_.push_back(std::make_unique<Running>(std::move(choices[c]), out, c));
        stats_.waiting = int64_t(waiting_.size());
    }
    cv_.notify_all();
    return out;
}

void Engine::finish(Running& r, const std::string& reason) {
    Update u;
    u.text = r.text.flush();
    u.finish_reason = reason;
    u.prompt_tokens = r.prompt_size();
    u.completion_tokens = r.generated();
    if (r.generated() == 0) {  // its first answer is its last (a scored prompt, or the end of text)
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - r.last).count();
        std::lock_guard lock(mu_);
        stats_.time_to_first_token.add(seconds);
    }
    r.push(u);
    r.ended = true;
}

namespace {

// The logits `l` a request chooses from after it generated `seen` (sorted; altered), its prompt's
// ids being `prompt_ids` (sorted, each once): each id of either divided by the repetition
// penalty where positive and multiplied where not (vLLM's order: before OpenAI's penalties); each
// generated id once, with its count, that - count * frequency - presence; then the logit biases;
// then, in JSON mode, every id that `json` (the text so far) cannot take masked.
// One expression per id, whose bits depend on the request's own tokens only.
void adjust_logits(const Request& q, std::span<const float> l, std::vector<int32_t>& seen,
                   std::span<const int32_t> prompt_ids, const JsonVocab* vocab,
                   const JsonPrefix& json, std::vector<float>& out) {
    std::sort(seen.begin(), seen.end());
    out.assign(l.begin(), l.end());
    const float rp = q.repetition_penalty;
    auto repeated = [&](size_t t) { return rp == 1 ? l[t] : l[t] > 0 ? l[t] / rp : l[t] * rp; };
    if (rp != 1)
        for (int32_t t : prompt_ids)
            if (size_t(t) < out.size()) out[size_t(t)] = repeated(size_t(t));
    for (size_t a = 0, b = 0; a < seen.size(); a = b) {
        while (b < seen.size() && seen[b] == seen[a]) ++b;
        const int32_t t = seen[a];
        if (size_t(t) >= out.size()) continue;
        out[size_t(t)] =
            repeated(size_t(t)) - float(b - a) * q.frequency_penalty - q.presence_penalty;
    }
    for (auto [id, bias] : q.logit_bias)
        if (size_t(id) < out.size()) out[size_t(id)] += bias;
    if (q.json_object) vocab->mask(json, int32_t(q.o.stop_token), out);
}

// The log-probability of `t` at `row` (minus infinity for an id past it: a model's padding,
// which the sampled distribution never gives), and the row's likeliest ids with theirs appended
// to `top` when `q` asks for them.
float scored_token(const Request& q, std::span<const float> row, int32_t t,
                   std::vector<std::vector<model::TokenLogprob>>& top) {
    const bool inside = size_t(t) < row.size();
    float lp = -std::numeric_limits<float>::infinity();
    if (!q.logprobs && q.top_logprobs == 0) return std::numeric_limits<float>::quiet_NaN();
    if (q.top_logprobs > 0) {
        top.emplace_back();
        const int64_t n = std::min(q.top_logprobs, int64_t(row.size()));
        const float at = model::token_logprob_top(row, inside ? t : 0, n, top.back());
        if (inside) lp = at;
    } else if (inside) {
        lp = model::token_logprob(row, t);
    }
    return lp;
}

}  // namespace

int32_t Engine::choose_next(const Running& r, std::span<const float> logits) const {
    const std::span<const float> l = logits.first(model::sampled_vocab(config(), r.req.o));
    const int64_t i = r.generated();
    std::span<const float> choose_from = l;
    thread_local std::vector<float> adjusted;
    if (r.req.adjusts_logits()) {
        thread_local std::vector<int32_t> seen;
        seen.assign(r.tokens.begin() + r.prompt_size(), r.tokens.end());
        adjust_logits(r.req, l, seen, r.prompt_ids, json_vocab_.get(), r.json, adjusted);
        choose_from = adjusted;
    }
    return model::pick_token(choose_from, r.req.o, r.rng.uniform(uint64_t(i)));
}

decode::Verdict Engine::accept_tree(Running& r, const decode::Guesses& guess,
                                    std::span<const float> logits) {
    const decode::TokenTree& tree = guess.tree;
    const size_t V = size_t(config().vocab_size), Vs = model::sampled_vocab(config(), r.req.o);
    auto row = [&](int k) { return logits.subspan(size_t(k) * V, Vs); };
    // With penalties or biases each row is chosen from as choose_next would at its place: after
    // the request's generated tokens and its path's (row 0 the root's, row k node k - 1's).
    decode::RowLogits choose_from = row;
    thread_local std::vector<std::vector<float>> adjusted;
    if (r.req.adjusts_logits()) {
        adjusted.resize(size_t(tree.size()) + 1);
        thread_local std::vector<int32_t> seen;
        for (int k = 0; k <= tree.size(); ++k) {
            seen.assign(r.tokens.begin() + r.prompt_size(), r.tokens.end());
            for (int n = k - 1; n >= 0; n = tree.parents[size_t(n)])
                seen.push_back(tree.tokens[size_t(n)]);
            // JSON mode: the text read on through the path, root first (`seen` has it from the
            // node up). A path through a token its row's mask refused is never accepted, so
            // the rows under it are never chosen from.
            JsonPrefix json = r.json;
            for (size_t at = seen.size(); r.req.json_object && at-- > size_t(r.generated());)
                if (!json.feed(json_vocab_->piece(seen[at]))) break;
            adjust_logits(r.req, row(k), seen, r.prompt_ids, json_vocab_.get(), json,
                          adjusted[size_t(k)]);
        }
        choose_from = [&](int k) { return std::span<const float>(adjusted[size_t(k)]); };
    }
    const decode::Verdict v =
        decode::accept(tree, choose_from, r.req.o, r.spec_rng, r.spec_counter, guess.proposal());
    {
        std::lock_guard lock(mu_);
        stats_.spec_guessed += tree.size();
        stats_.spec_accepted += int64_t(v.nodes.size());
        ++stats_.spec_verifies;
    }
    const int64_t root = r.computed - 1;  // the verify's root row sat here
    // The other ranks of a tensor-parallel server mirror this pool's blocks; the accepted nodes
    // of a tree move in each rank's pool, in theirs with the next step.
    decode::keep_accepted(pool_, r.table, root, v.nodes, tp_.announce ? &kv_moved_ : nullptr);
    // Each token with its log-probability at the row that chose it: the root's, then each
    // accepted node's.
    int at = 0;
    for (size_t k = 0; k < v.nodes.size(); ++k) {
        const int32_t t = tree.tokens[size_t(v.nodes[k])];
        emit(r, t, row(at));
        if (r.ended) return v;
        r.computed = root + 2 + int64_t(k);  // the node's keys are kept, at its position
        at = v.nodes[k] + 1;
    }
    emit(r, v.next, row(at));
    return v;
}

void Engine::emit(Running& r, int32_t t, std::span<const float> row) {
    if (t == r.req.o.stop_token) return finish(r, "stop");
    r.tokens.push_back(t);
    if (r.req.json_object)
        WEFT_CHECK(t < json_vocab_->size() && r.json.feed(json_vocab_->piece(t)),
                   "internal: JSON mode chose token {}, which no JSON object can continue with", t);
    bool stopped = false;
    Update u;
    u.text = r.text.add(piece_(t), stopped);
    u.tokens = {t};
    u.logprobs = {scored_token(r.req, row, t, u.top_logprobs)};
    u.prompt_tokens = r.prompt_size();
    u.completion_tokens = r.generated();
    {
        const auto now = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(now - r.last).count();
        r.last = now;
        std::lock_guard lock(mu_);
        ++stats_.generated_tokens;
        (r.generated() == 1 ? stats_.time_to_first_token : stats_.time_per_output_token)
            .add(seconds);
    }
    if (stopped)
        u.finish_reason = "stop";
    else if (r.generated() == r.req.o.tokens) {
        u.text += r.text.flush();
        u.finish_reason = "length";
    }
    r.ended = u.done();
    r.push(u);
}

void Engine::score_prompt(Running& r, std::span<const float> logits, int64_t rows) {
    const size_t V = size_t(config().vocab_size), Vs = model::sampled_vocab(config(), r.req.o);
    Update u;
    for (int64_t k = 0; k < rows; ++k, ++r.scored)
        u.prompt_logprobs.push_back(scored_token(r.req, logits.subspan(size_t(k) * V, Vs),
                                                 r.req.prompt[size_t(r.scored)],
                                                 u.prompt_top_logprobs));
    u.prompt_tokens = r.prompt_size();
    r.push(u);
}

void Engine::admit() {
    std::erase_if(waiting_, [](const auto& r) { return r->out->cancelled(); });
    // First come, first served: a large request at the head is not overtaken, so it cannot
    // starve behind a stream of small ones. It takes the blocks of every token it has (its
    // prompt, and what it generated before a preemption) at once, so that its prompt chunks
    // never wait for blocks.
    while (!waiting_.empty() && int64_t(running_.size()) < o_.slots) {
        Running& r = *waiting_.front();
        // Prefix caching: the full blocks of its tokens that another request published, all but
        // the last token (whose logits it needs). Their keys and values are the bits it would
        // compute itself, as a row's bits depend only on its sequence's tokens.
        const int64_t B = pool_.block_tokens();
        const std::span<const int32_t> t(r.tokens);
        for (int64_t j = 0; !r.scoring() && j < (int64_t(t.size()) - 1) / B; ++j) {
            const uint64_t h = model::KvPool::block_hash(r.hashes.empty() ? 0 : r.hashes.back(),
                                                         t.subspan(size_t(j * B), size_t(B)));
            const int32_t b = pool_.published(h);
            if (b < 0) break;
            pool_.retain(b);
            r.table.push_back(b);
            r.hashes.push_back(h);
        }
        if (!pool_.grow(r.table, int64_t(r.tokens.size()))) {
            pool_.release_all(r.table);
            r.hashes.clear();
            break;
        }
        r.computed = int64_t(r.hashes.size()) * B;
        stats_.prefix_cache_hit_tokens += r.computed;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
    stats_.waiting = int64_t(waiting_.size());
    stats_.running = int64_t(running_.size());
    stats_.kv_blocks_used = pool_.used_blocks();
}

void Engine::preempt_newest() {
    Running& r = *running_.back();
    pool_.release_all(r.table);
    if (draft_) draft_->release(r.draft);
    r.hashes.clear();
    r.computed = 0;
    std::lock_guard lock(mu_);
    waiting_.push_front(std::move(running_.back()));
    running_.pop_back();
    ++stats_.preemptions;
}

bool Engine::step() {
    {
        std::lock_guard lock(mu_);
        admit();
    }
    // Tokens wanted minus tokens computed: 1 for a request in decode, a chunk of its prompt (or,
    // recomputed, of its prompt and what it generated) for the others. Decodes first, then
    // chunks while the budget lasts (at least one per step, so that a prompt advances however
    // many decodes there are). Cut anywhere: a row's bits do not depend on its chunk.
    // A request in decode may run a tree of guesses after its last token instead (o_.spec).
    const size_t R = running_.size();
    std::vector<int64_t> n(R, 0);
    // Rows past a request's tokens: --spec ppd's prompt chain after its last prompt chunk.
    std::vector<int64_t> chain(R, 0);
    std::vector<decode::Guesses> trees(R);  // q: a draft's distributions
    std::vector<decode::PpdVerify> ppd_rows(R);
    // With speculation every decode step is a verify, even of no guess: its draws then come from
    // speculation's stream as `weft sample --spec`'s do.
    const bool speculate = o_.spec.kind != "none";
    std::vector<char> verify(R, 0);
    std::vector<size_t> decoding;
    std::vector<int64_t> room(R, 0);
    for (size_t i = 0; i < R; ++i) {
        const Running& r = *running_[i];
        if (r.out->cancelled() || int64_t(r.tokens.size()) - r.computed != 1) continue;
        decoding.push_back(i);
        // At most the tokens still wanted after the model's own, within the context.
        room[i] = std::min({r.req.o.tokens - r.generated() - 1,
                            config().n_positions - r.computed - 1, int64_t(o_.spec.guesses())});
    }
    // The draft guesses for every request at once, one forward a guess depth.
    if (draft_) {
        std::vector<decode::DraftJob> jobs;
        for (size_t i : decoding) {
            Running& r = *running_[i];
            jobs.push_back(
                {&r.draft, r.tokens, room[i], &r.req.o, &r.draft_rng, &r.draft_counter, {}});
        }
        draft_->propose(jobs);
        for (size_t k = 0; k < decoding.size(); ++k) {
            // A chain of at most `room` guesses stays within the request's text; the leaves
            // beside it (--draft-width) take the slots after the chain's, the first ones that
            // the request's blocks hold.
            const Running& r = *running_[decoding[k]];
            jobs[k].out.tree.truncate(positions_for(r.req) - r.computed - 1);
            trees[decoding[k]] = std::move(jobs[k].out);
        }
    }
    int64_t budget = o_.batch_tokens;
    for (size_t i : decoding) {
        const Running& r = *running_[i];
        if (ppd_) {
            ppd_rows[i] = ppd_->verify(r.tokens.back(), r.ppd_guesses, room[i], r.computed,
                                       config().n_positions);
            trees[i].tree = ppd_rows[i].tree;
        } else if (!draft_) {
            trees[i].tree = decode::propose(o_.spec, r.tokens, room[i]);
        }
        verify[i] = speculate;
        n[i] = ppd_ ? int64_t(ppd_rows[i].rows.size()) : 1 + trees[i].tree.size();
        budget -= n[i];
    }
    bool chunked = false;
    for (size_t i = 0; i < R; ++i) {
        const Running& r = *running_[i];
        const int64_t want = int64_t(r.tokens.size()) - r.computed;
        if (r.out->cancelled() || want <= 1) continue;
        if (chunked && budget <= 0) break;
        n[i] = std::min({want, o_.batch_tokens, chunked ? budget : o_.batch_tokens});
        // A prompt being scored ends without PPD's prompt chain: its first verify guesses
        // nothing, and its chain's guesses come from then on.
        if (ppd_ && n[i] == want && !r.scoring())
            chain[i] = ppd_->chain_after(int64_t(r.tokens.size()), config().n_positions);
        budget -= n[i] + chain[i];
        chunked = true;
    }
    // Blocks for the new positions, oldest request first; when none is free the newest running
    // request gives its blocks back (possibly the one asking, when it is the newest).
    for (size_t i = 0; i < running_.size(); ++i) {
        Running& r = *running_[i];
        while (n[i] > 0 && !pool_.grow(r.table, r.computed + n[i] + chain[i])) {
            const bool self = i + 1 == running_.size();
            preempt_newest();
            if (self) break;
        }
    }
    batch_.clear();
    if (ppd_) ppd_->attach(batch_);
    std::vector<char> sampled(R, 0);
    std::vector<int64_t> scores(R, 0);  // logit rows that score prompt tokens, before the last
    std::vector<int32_t> rows, parents;
    int64_t prompt_tokens = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
        if (n[i] == 0) continue;
        Running& r = *running_[i];
        if (verify[i]) {  // its last token and its guesses (and prompt rows), every row's logits
            if (ppd_) {
                batch_.add_tree(ppd_rows[i].rows, ppd_rows[i].parents, r.computed, r.table);
            } else {
                decode::tree_rows(r.tokens.back(), trees[i].tree, rows, parents);
                batch_.add_tree(rows, parents, r.computed, r.table);
            }
            r.computed += 1;  // the root; the accepted guesses follow in accept_tree
            continue;
        }
        const bool last = r.computed + n[i] == int64_t(r.tokens.size());
        const std::span<const int32_t> t =
            std::span<const int32_t>(r.tokens).subspan(size_t(r.computed), size_t(n[i]));
        if (chain[i] > 0) {
            ppd_->add_context(batch_, t, r.computed, r.table, config().n_positions);
        } else if (r.scoring()) {
            // Row p scores prompt token p + 1: the rows from the next one to score on (a
            // recomputed chunk's were scored before), the last one only to sample.
            const int64_t from = std::max(r.computed, r.scored - 1);
            scores[i] =
                std::max<int64_t>(0, std::min(r.computed + n[i], r.prompt_size() - 1) - from);
            batch_.add_from(t, r.computed, r.table, from - r.computed);
        } else {
            batch_.add(t, r.computed, r.table, last);
        }
        prompt_tokens +=
            std::max<int64_t>(0, std::min(r.prompt_size(), r.computed + n[i]) - r.computed);
        r.computed += n[i];
        sampled[i] = last;
    }
    if (tp_.announce && batch_.rows() > 0) {
        batch_.kv_moves.swap(kv_moved_);
        tp_.announce(batch_);
        kv_moved_.clear();
    }
    const std::span<const float> logits = forward_.run(batch_, pool_);
    const size_t V = size_t(config().vocab_size);
    // The logit rows are in the order the requests were added: for each, its rows that score
    // prompt tokens, then its verify's rows, or its one sampled row (and its prompt chain's).
    // rows_at[i]: where request i's rows after its scoring ones begin.
    auto verifies = [&](size_t i) { return verify[i] && n[i] > 0; };
    std::vector<size_t> rows_at(R, 0);
    std::vector<size_t> to_choose;
    for (size_t i = 0, at = 0; i < running_.size(); ++i) {
        at += size_t(scores[i]);
        rows_at[i] = at;
        if (verifies(i)) {
            at += size_t(n[i]);
        } else if (sampled[i]) {
            if (running_[i]->req.o.tokens > 0) to_choose.push_back(i);
            at += 1 + size_t(chain[i]);
        }
    }
    // The sampled requests' next tokens side by side on the products' team (a sampled choice
    // sorts and weighs the whole sampled vocabulary, 0.6 ms over 50257 ids in bench_sampling, and
    // ran request after request on this thread); each is made whole by one thread, the same bits.
    std::vector<int32_t> chosen(R, -1);
    auto choose = [&](int64_t k) {
        const size_t i = to_choose[size_t(k)];
        chosen[i] = choose_next(*running_[i], logits.subspan(rows_at[i] * V, V));
    };
    if (!kernels::team_for(int64_t(to_choose.size()), choose))
        for (size_t k = 0; k < to_choose.size(); ++k) choose(int64_t(k));
    for (size_t i = 0; i < running_.size(); ++i) {
        Running& r = *running_[i];
        const size_t at = rows_at[i];
        if (scores[i] > 0) score_prompt(r, logits.subspan((at - size_t(scores[i])) * V), scores[i]);
        if (verifies(i)) {
            const std::span<const float> l = logits.subspan(at * V, size_t(n[i]) * V);
            const decode::Verdict v = accept_tree(r, trees[i], l);
            if (ppd_)
                r.ppd_guesses =
                    ppd_->guesses_after(ppd_rows[i], v, l, model::sampled_vocab(config(), r.req.o));
        } else if (sampled[i] && r.req.o.tokens == 0) {
            finish(r, "length");
        } else if (sampled[i]) {
            emit(r, chosen[i], logits.subspan(at * V, model::sampled_vocab(config(), r.req.o)));
            if (ppd_)
                r.ppd_guesses = ppd_->guesses(logits.subspan(at * V), 1, chain[i],
                                              model::sampled_vocab(config(), r.req.o));
        }
    }
    // The blocks filled in this step, published for the requests with the same prefix.
    const int64_t B = pool_.block_tokens();
    for (auto& r : running_)
        while ((int64_t(r->hashes.size()) + 1) * B <= r->computed) {
            const size_t j = r->hashes.size();
            const uint64_t h = model::KvPool::block_hash(
                j == 0 ? 0 : r->hashes.back(),
                std::span<const int32_t>(r->tokens).subspan(j * size_t(B), size_t(B)));
            pool_.publish(r->table[j], h);
            r->hashes.push_back(h);
        }
    std::lock_guard lock(mu_);
    stats_.prompt_tokens += prompt_tokens;
    if (batch_.rows() > 0) ++stats_.steps;
    const size_t before = running_.size();
    std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
        const bool done = r->out->cancelled() || r->ended;
        if (done) pool_.release_all(r->table);
        if (done && draft_) draft_->release(r->draft);
        return done;
    });
    stats_.requests_done += int64_t(before - running_.size());
    stats_.running = int64_t(running_.size());
    stats_.waiting = int64_t(waiting_.size());
    stats_.kv_blocks_used = pool_.used_blocks();
    return batch_.rows() > 0 || before != running_.size();
}

void Engine::run(const std::atomic<bool>& stop) {
    for (;;) {
        if (step()) continue;
        std::unique_lock lock(mu_);
        if (stop && waiting_.empty() && running_.empty()) return;
        cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !waiting_.empty(); });
    }
}

EngineStats Engine::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

}  // namespace weft::serve
