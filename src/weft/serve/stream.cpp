#include "weft/serve/stream.hpp"

namespace weft::serve {

void Stream::push(const Update& u) {
    {
        std::lock_guard lock(mu_);
        pending_.text += u.text;
        pending_.tokens.insert(pending_.tokens.end(), u.tokens.begin(), u.tokens.end());
        pending_.logprobs.insert(pending_.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
        if (u.done()) pending_.finish_reason = u.finish_reason;
        pending_.prompt_tokens = u.prompt_tokens;
        pending_.completion_tokens = u.completion_tokens;
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
