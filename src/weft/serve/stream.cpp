#include "weft/serve/stream.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::serve {

namespace {

template <typename T>
void append(std::vector<T>& to, const std::vector<T>& from) {
    to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

void Update::merge(const Update& u) {
    text += u.text;
    append(tokens, u.tokens);
    append(logprobs, u.logprobs);
    append(top_logprobs, u.top_logprobs);
    append(prompt_logprobs, u.prompt_logprobs);
    append(prompt_top_logprobs, u.prompt_top_logprobs);
    if (u.done()) finish_reason = u.finish_reason;
    prompt_tokens = u.prompt_tokens;
    completion_tokens = u.completion_tokens;
}

void Stream::push(size_t choice, const Update& u) {
    {
        std::lock_guard lock(mu_);
        WEFT_CHECK(choice < pending_.size(), "internal: choice {} of a stream of {}", choice,
                   pending_.size());
        pending_[choice].merge(u);
        news_[choice] = 1;
    }
    cv_.notify_all();
}

std::vector<size_t> Stream::take(std::vector<Update>& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    auto any = [&] { return std::find(news_.begin(), news_.end(), 1) != news_.end(); };
    std::vector<size_t> fresh;
    if (!cv_.wait_for(lock, timeout, any)) return fresh;
    out.assign(pending_.size(), Update{});
    for (size_t c = 0; c < pending_.size(); ++c) {
        if (!news_[c]) continue;
        out[c] = std::move(pending_[c]);
        pending_[c] = Update{};
        news_[c] = 0;
        fresh.push_back(c);
    }
    return fresh;
}

bool Stream::take(Update& out, std::chrono::milliseconds timeout) {
    WEFT_CHECK(pending_.size() == 1, "internal: a stream of {} choices read as one",
               pending_.size());
    std::vector<Update> all;
    if (take(all, timeout).empty()) return false;
    out = std::move(all[0]);
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
