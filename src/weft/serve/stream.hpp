#pragma once
// The hand-off of one request's output between the engine loop, which pushes what each step
// produced, and whoever submitted it (an HTTP handler thread), which waits for it. Updates merge
// while nobody looks, so a slow reader never holds the engine up.
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
    std::string finish_reason;  // empty while running; "stop" or "length" at the end
    int64_t prompt_tokens = 0, completion_tokens = 0;

    bool done() const { return !finish_reason.empty(); }
    // u's text, tokens and log-probabilities after these, its counts and finish reason instead.
    void merge(const Update& u);
};

class Stream {
  public:
    // Engine side: adds u to what waits to be read.
    void push(const Update& u);
    // Reader side: waits up to `timeout` for news and takes it; false when there is none.
    bool take(Update& out, std::chrono::milliseconds timeout);
    // Reader side: the client is gone; the engine drops the request at its next step.
    void cancel();
    bool cancelled() const;

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    Update pending_;
    bool news_ = false, cancelled_ = false;
};

}  // namespace weft::serve
