#include "weft/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/serve/stop_text.hpp"

namespace weft::serve {

struct Engine::Running {
    Running(Request req_, int64_t blocks_)
        : req(std::move(req_)),
          out(std::make_shared<Stream>()),
          tokens(req.prompt),
          rng(philox_for(req.o.seed, "sample")),
          text(req.stop),
          blocks(blocks_) {}

    Request req;
    std::shared_ptr<Stream> out;
    // Made on admission, not while waiting: the memory the pool counts. The positions it can
    // reach, not the model's whole context.
    std::optional<model::KvCache> cache;
    std::vector<int32_t> tokens;  // the prompt, then what was generated
    int64_t computed = 0;         // positions in the cache
    Philox rng;                   // as `weft sample`'s: token i draws its uniform number i
    StopText text;
    int64_t blocks;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();  // submitted
    bool ended = false;  // its last update, with a finish reason, was pushed

    int64_t prompt_size() const { return int64_t(req.prompt.size()); }
    int64_t generated() const { return int64_t(tokens.size()) - prompt_size(); }
};

int64_t kv_blocks_for(const Request& r, int64_t block_tokens) {
    const int64_t positions = int64_t(r.prompt.size()) + r.o.tokens;
    return (positions + block_tokens - 1) / block_tokens;
}

int64_t kv_blocks_in(double gib, int64_t n_layer, int64_t kv_width, int64_t block_tokens) {
    const double block_bytes = 2.0 * double(n_layer * kv_width * block_tokens) * sizeof(float);
    return int64_t(gib * double(int64_t(1) << 30) / block_bytes);
}

void EngineOptions::validate() const {
    WEFT_CHECK(slots >= 1, "--slots must be at least 1, got {}", slots);
    WEFT_CHECK(batch_tokens >= 1, "--batch-tokens must be at least 1, got {}", batch_tokens);
}

Engine::Engine(const model::ModelConfig& cfg, const model::ParamLayout& layout, const float* params,
               std::function<std::string(int32_t)> piece, EngineOptions o)
    : forward_(cfg, layout, params), piece_(std::move(piece)), o_(o) {
    o_.validate();
    WEFT_CHECK(o_.kv_blocks >= 1,
               "the KV cache pool holds no block of {} positions (expected a larger "
               "--kv-cache-gib)",
               o_.block_tokens);
    stats_.kv_blocks_total = o_.kv_blocks;
}

Engine::~Engine() = default;

void Engine::check(const Request& r) const {
    const model::ModelConfig& cfg = config();
    r.o.validate();
    WEFT_CHECK(!r.prompt.empty(), "the prompt is empty (expected at least one token)");
    WEFT_CHECK(r.o.tokens >= 1, "max_tokens must be at least 1, got {}", r.o.tokens);
    model::check_prompt(cfg, r.prompt);
    const int64_t positions = int64_t(r.prompt.size()) + r.o.tokens;
    WEFT_CHECK(positions <= cfg.n_positions,
               "the prompt's {} tokens and max_tokens {} make {} positions, past the model's "
               "context of {} (expected prompt tokens + max_tokens <= {})",
               r.prompt.size(), r.o.tokens, positions, cfg.n_positions, cfg.n_positions);
    const int64_t blocks = kv_blocks_for(r, o_.block_tokens);
    WEFT_CHECK(blocks <= o_.kv_blocks,
               "the request needs {} KV cache blocks of {} positions, more than the pool's {} "
               "(expected a larger --kv-cache-gib, or fewer tokens)",
               blocks, o_.block_tokens, o_.kv_blocks);
}

std::shared_ptr<Stream> Engine::submit(Request r) {
    check(r);
    const int64_t blocks = kv_blocks_for(r, o_.block_tokens);
    auto run = std::make_unique<Running>(std::move(r), blocks);
    std::shared_ptr<Stream> out = run->out;
    {
        std::lock_guard lock(mu_);
        waiting_.push_back(std::move(run));
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
    r.out->push(u);
    r.ended = true;
}

void Engine::sample_next(Running& r, std::span<const float> logits) {
    const std::span<const float> l = logits.first(model::sampled_vocab(config(), r.req.o));
    const int64_t i = r.generated();
    const int32_t t = model::pick_token(l, r.req.o, r.rng.uniform(uint64_t(i)));
    // The token's log-probability under the model itself (not the sampling's temperature), in
    // double from the fp32 logits: the same bits for the same logits.
    const double top = *std::max_element(l.begin(), l.end());
    double sum = 0;
    for (float x : l) sum += std::exp(double(x) - top);
    const float logprob = float(double(l[size_t(t)]) - top - std::log(sum));
    if (t == r.req.o.stop_token) return finish(r, "stop");
    r.tokens.push_back(t);
    bool stopped = false;
    Update u;
    u.text = r.text.add(piece_(t), stopped);
    u.tokens = {t};
    u.logprobs = {logprob};
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
    r.out->push(u);
}

bool Engine::step() {
    {
        std::lock_guard lock(mu_);
        std::erase_if(waiting_, [](const auto& r) { return r->out->cancelled(); });
        // First come, first served: a large request at the head is not overtaken, so it cannot
        // starve behind a stream of small ones.
        while (!waiting_.empty() && int64_t(running_.size()) < o_.slots &&
               stats_.kv_blocks_used + waiting_.front()->blocks <= o_.kv_blocks) {
            Running& r = *waiting_.front();
            stats_.kv_blocks_used += r.blocks;
            r.cache.emplace(config().n_layer, r.prompt_size() + r.req.o.tokens,
                            forward_.kv_width());
            running_.push_back(std::move(waiting_.front()));
            waiting_.pop_front();
        }
        stats_.waiting = int64_t(waiting_.size());
        stats_.running = int64_t(running_.size());
    }
    // Tokens wanted minus tokens computed: 1 for a request in decode, a chunk of the prompt for
    // one in prefill. Decodes first, then whole chunks while the budget lasts (at least one per
    // step, so that a prompt advances however many decodes there are).
    struct Work {
        Running* r;
        int64_t n;
    };
    std::vector<Work> work;
    int64_t budget = o_.batch_tokens;
    for (auto& r : running_)
        if (!r->out->cancelled() && r->computed >= r->prompt_size()) {
            work.push_back({r.get(), 1});
            --budget;
        }
    bool chunked = false;
    for (auto& r : running_) {
        if (r->out->cancelled() || r->computed >= r->prompt_size()) continue;
        const int64_t n = std::min(o_.batch_tokens, r->prompt_size() - r->computed);
        if (chunked && n > budget) break;
        work.push_back({r.get(), n});
        budget -= n;
        chunked = true;
    }
    int64_t prompt_tokens = 0;
    for (const Work& w : work) {
        Running& r = *w.r;
        std::span<const float> logits = forward_.feed(
            *r.cache, r.computed,
            std::span<const int32_t>(r.tokens).subspan(size_t(r.computed), size_t(w.n)));
        if (r.computed < r.prompt_size()) prompt_tokens += w.n;
        r.computed += w.n;
        if (r.computed == int64_t(r.tokens.size())) sample_next(r, logits);
    }
    std::lock_guard lock(mu_);
    stats_.prompt_tokens += prompt_tokens;
    if (!work.empty()) ++stats_.steps;
    const size_t before = running_.size();
    std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
        const bool done = r->out->cancelled() || r->ended;
        if (done) stats_.kv_blocks_used -= r->blocks;
        return done;
    });
    stats_.requests_done += int64_t(before - running_.size());
    stats_.running = int64_t(running_.size());
    return !work.empty() || before != running_.size();
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
