#pragma once
// How far an optimizer step running behind the next forward has got (docs/memory.md, "the
// update behind the forward"). The step moves through the padded parameter buffer in order and
// advances a mark; a reader of parameters [.., end) waits until the mark has passed `end`. A
// failed step closes the fence with its error, which every waiter then rethrows, so that a
// disk that fills up mid-update is reported once, before any weight it did not write is read.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>

namespace weft::parallel {

class UpdateFence {
  public:
    // A step begins: nothing is updated yet.
    void open();
    // Everything below `end` is updated (the updater's thread).
    void advance(int64_t end);
    // The step is over: everything is updated, or `error` says why not.
    void close(std::exception_ptr error = nullptr);
    // Whether a step is running behind.
    bool is_open() const;
    // Blocks until everything below `end` is updated; rethrows the step's error. Returns the
    // seconds it waited.
    double wait(int64_t end);

  private:
    static constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
    mutable std::mutex m_;
    std::condition_variable cv_;
    int64_t ready_ = kAll;
    std::exception_ptr error_;
};

}  // namespace weft::parallel
