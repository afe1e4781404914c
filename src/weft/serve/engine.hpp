#pragma once
// The serving engine: a queue of requests and a loop whose every step serves each running request
// (continuous batching, as vLLM's scheduler and llama.cpp's server slots do). There is no prefill
// or decode phase, only the tokens a request has computed chasing the tokens it wants: each step
// runs one decode token of every request that has its prompt in the cache, then prompt chunks
// of the others up to a token budget (Sarathi-Serve's chunked prefill). Requests join at the next
// step and leave as soon as they are done. The engine knows no sockets: a front end submits a
// Request and reads its Stream.
//
// One forward per step for every row of every request (model::RowForward, the one `weft sample`
// runs), over a paged KV cache (model::KvPool: a block table per request, blocks taken as it
// grows). Batch invariance: a request's tokens and logprobs never depend on the others, nor on
// how its prompt is cut into chunks, nor on a preemption, because each row of that forward is the
// same bits whatever the other rows (Model::forward_rows). When a running request needs a block
// and none is free, the newest running one is preempted: its blocks are freed and it waits at
// the head of the queue, to be recomputed from its prompt and what it generated. Full blocks are
// shared between requests whose tokens up to them are the same (prefix caching, KvPool).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/decode/ppd.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/model/generate.hpp"
#include "weft/serve/histogram.hpp"
#include "weft/serve/json_prefix.hpp"
#include "weft/serve/stream.hpp"

namespace weft::serve {

struct Request {
    std::vector<int32_t> prompt;
    // o.tokens: the most tokens to generate; o.stop_token: the end of text (ends with "stop").
    model::SampleOptions o;
    std::vector<std::string> stop;  // stop strings, none empty
    // Each chosen token's log-probability in its update (Update::logprobs): off when the answer
    // shows none and ranks none, as a log-softmax over the whole vocabulary for each of 16
    // requests took 0.15-0.3 ms of a 15-17 ms step on one thread (NaN in its place then).
    bool logprobs = true;
    // With each token, this many most likely tokens and their log-probabilities (at most
    // kMaxTopLogprobs; the sampled vocabulary's size if that is fewer).
    int64_t top_logprobs = 0;
    static constexpr int64_t kMaxTopLogprobs = 20;
    // OpenAI's penalties, in [-2, 2]: before a token is chosen, each id's logit loses
    // frequency_penalty times the times the request has generated it, and presence_penalty once
    // if it has. The log-probabilities stay the model's own. Under speculation each verify row
    // is chosen from so, after the tokens before it.
    float frequency_penalty = 0, presence_penalty = 0;
    // vLLM's (and Hugging Face's) repetition penalty, > 0 (1: off): the logit of each id of the
    // prompt or of what the request has generated is divided by it where positive, multiplied
    // where not, before OpenAI's penalties; under speculation as they are.
    float repetition_penalty = 1;
    // OpenAI's logit_bias: (id, bias in [-100, 100]) pairs, ids apart, added to those logits
    // before a token is chosen (after the penalties), under speculation too.
    std::vector<std::pair<int32_t, float>> logit_bias;
    // OpenAI's JSON mode: only tokens after which the text can still end as one JSON object
    // (serve/json_prefix.hpp), the end of text once it has; masked after the biases, under
    // speculation too. The log-probabilities stay the model's.
    bool json_object = false;
    // With json_object, OpenAI's structured outputs: the object is an instance of this schema
    // (json_schema.hpp says which keywords are enforced).
    std::shared_ptr<const JsonSchema> json_schema;
    bool adjusts_logits() const {
        return frequency_penalty != 0 || presence_penalty != 0 || repetition_penalty != 1 ||
               !logit_bias.empty() || json_object;
    }
    // Score the prompt too: each prompt token after the first gets its log-probability under
    // the prompt before it (and top_logprobs' alternatives), as OpenAI's `echo` with `logprobs`
    // (what lm-eval's loglikelihood asks). Its prompt is computed in full, never taken from
    // another request's blocks.
    bool prompt_logprobs = false;
    // Which of a request's choices this is (OpenAI's `n`): each draws its random numbers from
    // streams of its own, choice 0 from `weft sample`'s.
    int64_t choice = 0;
};

struct EngineOptions {
    int slots = 16;              // requests running at once; more wait
    int64_t batch_tokens = 512;  // a step's token budget, and the prompt chunk size
    int64_t block_tokens = 16;   // KV cache positions per block of the pool
    int64_t kv_blocks = 0;       // blocks in the pool
    // Guessed tokens verified in the same step (docs/decoding.md): a request in decode runs a
    // tree of rows and may take several tokens a step; its output is what it would be without.
    decode::SpecOptions spec;
    bool bf16 = false;  // products on weights rounded to bf16 (--dtype bf16)

    // Errors naming --slots or --batch-tokens (the pool is checked by the engine).
    void validate() const;
};

struct EngineStats {
    int64_t running = 0, waiting = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0;  // since the start
    int64_t requests_done = 0, steps = 0;
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int64_t preemptions = 0;  // running requests sent back to wait for KV blocks
    int64_t spec_guessed = 0, spec_accepted = 0;  // guessed tokens verified, and kept
    int64_t spec_verifies = 0;  // decode steps of a request that verified (tau: 1 + kept / this)
    int64_t prefix_cache_hit_tokens = 0;  // prompt positions taken from published blocks
    // Seconds from a request's submission to its first token, and between its tokens.
    Histogram time_to_first_token, time_per_output_token;
};

// KV pool blocks that `gib` GiB hold for a model of n_layer layers of kv_width floats per position
// (keys and values, fp32, or bf16 with `bf16`).
int64_t kv_blocks_in(double gib, int64_t n_layer, int64_t kv_width, int64_t block_tokens,
                     bool bf16);

// Tensor-parallel serving (docs/serving.md): the engine runs on rank 0 of a group whose every
// rank runs each step's forward on its shard of the model. `announce` tells the other ranks a
// step's rows just before this rank runs them.
struct EngineTp {
    model::TpComm* comm = nullptr;  // null: the whole model in this process
    std::function<void(const model::RowBatch&)> announce;
};

class Engine {
  public:
    // `piece`: the bytes of one token (for stop strings and the streamed text). `draft`: the
    // model of --spec draft (o.spec), whose own cache holds every running request's tokens;
    // under `tp`, where `params` is rank 0's shard (model::tp_shard), a whole model on rank 0
    // alone. --spec ppd's prompt tokens are o.spec.ppd. Under `tp` the moves of a tree's kept
    // leaves go to the other ranks with the next step (RowBatch::kv_moves).
    Engine(const model::ModelConfig& cfg, const model::ParamLayout& layout, const float* params,
           std::function<std::string(int32_t)> piece, EngineOptions o,
           std::unique_ptr<decode::DraftModel> draft = nullptr, EngineTp tp = {});
    ~Engine();

    // An error (weft::Error) naming what makes `r` impossible to serve: an empty prompt, ids
    // outside the vocabulary, more positions than the model's context or the whole KV pool.
    void check(const Request& r) const;
    // Queues a checked request; its output arrives on the returned stream.
    std::shared_ptr<Stream> submit(Request r);
    // Queues checked requests as the choices of one stream (choices[c]'s output as its c-th;
    // each draws by its own Request::choice).
    std::shared_ptr<Stream> submit(std::vector<Request> choices);
    // One forward of one token, its KV blocks released after: what the model's first forward
    // does once (its bf16 weights packed into tiles, their pages touched) then is not the first
    // request's time to first token. Under tp the other ranks run it too (announced as a step).
    // Returns the seconds it took.
    double warm_up();
    // One engine step; false when there was nothing to do.
    bool step();
    // Steps until `stop` is set and nothing is running or waiting (a drain).
    void run(const std::atomic<bool>& stop);
    EngineStats stats() const;
    const model::ModelConfig& config() const { return forward_.config(); }
    const EngineOptions& options() const { return o_; }

  private:
    struct Running;
    void finish(Running& r, const std::string& reason);
    // The next token of `r` from its logits row: after its penalties and biases, drawn with its
    // random stream at its place (a pure function of the row and the request: the choices of a
    // step are made side by side, one request each, by whichever thread).
    int32_t choose_next(const Running& r, std::span<const float> logits) const;
    // Hands the log-probabilities of the prompt's next `rows` tokens, from their logit rows in
    // `logits`, to a request that scores its prompt.
    void score_prompt(Running& r, std::span<const float> logits, int64_t rows);
    // Hands `t`, chosen at the logits `row` (the sampled vocabulary's), with its log-probability
    // (and the top ones the request asks for) to the request's stream, or ends it.
    void emit(Running& r, int32_t t, std::span<const float> row);
    // A speculating request's verdict on its tree's rows (their logits from `logits`), the
    // accepted tokens and the model's next one emitted; the verdict.
    decode::Verdict accept_tree(Running& r, const decode::Guesses& guess,
                                std::span<const float> logits);
    // Positions of the KV cache a request may write: its prompt and max_tokens, and under
    // --spec ppd the prompt rows of a verify past them.
    int64_t positions_for(const Request& r) const;
    const JsonVocab& json_vocab() const;
    // Takes waiting requests while slots and the blocks of their tokens are free (lock held).
    void admit();
    // Frees the blocks of the newest running request and puts it at the head of the queue.
    void preempt_newest();

    model::RowForward forward_;
    model::KvPool pool_;                         // the engine loop's alone (stats_ counts it)
    std::unique_ptr<decode::DraftModel> draft_;  // --spec draft's, the engine loop's alone
    std::optional<decode::PpdProposer> ppd_;     // --spec ppd's
    model::RowBatch batch_;
    // Under tp: the KV moves of the verifies accepted since the last announced step, which the
    // other ranks make before the next (RowBatch::kv_moves).
    std::vector<int64_t> kv_moved_;
    std::function<std::string(int32_t)> piece_;
    // Every token's bytes, for JSON mode: made when the first request that asks for it is
    // checked (json_vocab()), read by the engine loop after.
    mutable std::once_flag json_once_;
    mutable std::unique_ptr<JsonVocab> json_vocab_;
    EngineOptions o_;
    EngineTp tp_;
    mutable std::mutex mu_;  // guards waiting_ and stats_
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Running>> waiting_;
    std::vector<std::unique_ptr<Running>> running_;  // the engine loop's alone
    EngineStats stats_;
};

}  // namespace weft::serve
