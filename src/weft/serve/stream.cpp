#include "weft/serve/stream.hpp"

namespace weft::serve {

void Update::merge(const Update& u) {
    text += u.text;
    tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
    logprobs.insert(logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    top_logprobs.insert(top_logprobs.end(), u.top_logprobs.begin(), u.top_logprobs.end());
    if (u.done()) finish_reason = u.finish_reason;
    prompt_tokens = u.prompt_tokens;
    completion_tokens = u.completion_tokens;
}

void Stream::push(const Update& u) {
    {
        std::lock_guard lock(mu_);
        pending_.merge(u);
        news_ = true;
    }
    cv_.notify_all();
}

bool Stream::take(Update& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return news_; })) return false;
    out = std::move(pending_);
    pending_ = Update{};
    news_ = false;
    return true;
}

void Stream::cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
}

bool Stream::cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
}

}  // namespace weft::serve
