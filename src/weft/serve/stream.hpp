#pragma once
// The hand-off of one request's output between the engine loop, which pushes what each step
// produced, and whoever submitted it (an HTTP handler thread), which waits for it. A request of
// several choices (OpenAI's `n`, or a batch of prompts) has one stream whose updates are kept
// apart by choice. Updates merge while nobody looks, so a slow reader never holds the engine up.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "weft/model/generate.hpp"

namespace weft::serve {

// What a request produced since the last look.
struct Update {
    std::string text;  // byte-level text, held back where a stop string may begin
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;  // of each token under the model (log-softmax of its logits)
    // Of each token, when its request asks for them (Request::top_logprobs): the most likely
    // tokens at its place and their log-probabilities, most likely first.
    std::vector<std::vector<model::TokenLogprob>> top_logprobs;
    // When its request scores its prompt (Request::prompt_logprobs): the log-probabilities of
    // the prompt's next tokens after the first, in order, each under the prompt before it, and
    // their alternatives as top_logprobs'.
    std::vector<float> prompt_logprobs;
    std::vector<std::vector<model::TokenLogprob>> prompt_top_logprobs;
    std::string finish_reason;  // empty while running; "stop" or "length" at the end
    int64_t prompt_tokens = 0, completion_tokens = 0;

    bool done() const { return !finish_reason.empty(); }
    // u's text, tokens and log-probabilities after these, its counts and finish reason instead.
    void merge(const Update& u);
};

class Stream {
  public:
    explicit Stream(size_t choices = 1) : pending_(choices), news_(choices, 0) {}
    size_t choices() const { return pending_.size(); }
    // Engine side: adds u to what waits to be read of `choice`.
    void push(size_t choice, const Update& u);
    // Reader side: waits up to `timeout` for news of any choice and takes it all: out[c] is
    // choice c's update since the last look; the choices with news, in order (none: timed out).
    std::vector<size_t> take(std::vector<Update>& out, std::chrono::milliseconds timeout);
    // The same for a stream of one choice; false when there is no news.
    bool take(Update& out, std::chrono::milliseconds timeout);
    // Reader side: the client is gone; the engine drops every choice at its next step.
    void cancel();
    bool cancelled() const;

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Update> pending_;
    std::vector<char> news_;
    bool cancelled_ = false;
};

}  // namespace weft::serve
