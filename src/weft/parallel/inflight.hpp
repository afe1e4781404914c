#pragma once
// Non-blocking collectives in flight, completed in the order they were posted, and the clock
// that says how much of their time was hidden behind compute.
//
// Open MPI progresses an operation only inside MPI calls, so the data-parallel hooks call poll()
// between layers. Completion callbacks (adding a reduced gradient slice into the shard) run in
// posting order whatever order MPI finishes in, so results do not depend on timing.
//
// Accounting: `outstanding_s` is the wall time during which at least one operation was posted
// and not yet seen complete; `blocked_s` the time this rank spent inside poll() and wait()
// (waiting, or driving MPI instead of computing). hidden() = 1 - blocked / outstanding. A
// completion is seen at the next poll, so outstanding time (and the hidden share) is an upper
// bound by up to one layer's compute per operation.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>

#include "weft/comm/request.hpp"

namespace weft::parallel {

struct OverlapTimes {
    double outstanding_s = 0, blocked_s = 0;
    double hidden() const;  // 1 - blocked / outstanding; 1 when nothing was outstanding
    OverlapTimes& operator+=(const OverlapTimes& o);
};

class InFlight {
  public:
    InFlight() = default;
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight();

    // Takes the request; `on_done` runs once it and every operation posted before it are done.
    // Returns a ticket for wait().
    uint64_t add(comm::Request request, std::function<void()> on_done = {});
    // Tests each pending operation once and completes the done ones at the front.
    void poll();
    // Blocks until the operation with this ticket (and every earlier one) is complete.
    void wait(uint64_t ticket);
    void wait_all();
    bool done(uint64_t ticket) const { return ticket < completed_; }

    OverlapTimes take_times();  // returns the times so far and resets them

  private:
    using Clock = std::chrono::steady_clock;
    struct Op {
        comm::Request request;
        std::function<void()> on_done;
        bool done = false;
    };
    void complete_front();
    void account_idle();

    std::deque<Op> ops_;
    uint64_t posted_ = 0, completed_ = 0;
    Clock::time_point busy_since_;
    OverlapTimes times_;
};

}  // namespace weft::parallel
