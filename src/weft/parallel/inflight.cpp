#include "weft/parallel/inflight.hpp"

#include <algorithm>

namespace weft::parallel {

namespace {
double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}
}  // namespace

double OverlapTimes::hidden() const {
    if (outstanding_s <= 0) return 1.0;
    return std::max(0.0, 1.0 - blocked_s / outstanding_s);
}

OverlapTimes& OverlapTimes::operator+=(const OverlapTimes& o) {
    outstanding_s += o.outstanding_s;
    blocked_s += o.blocked_s;
    return *this;
}

InFlight::~InFlight() {
    // Requests wait in their destructors anyway; completing them here keeps callbacks in order.
    wait_all();
}

uint64_t InFlight::add(comm::Request request, std::function<void()> on_done) {
    if (ops_.empty() && request.done()) {  // nothing left the rank (a group of one)
        ++completed_;
        if (on_done) on_done();
        return posted_++;
    }
    if (ops_.empty()) busy_since_ = Clock::now();
    ops_.push_back({std::move(request), std::move(on_done)});
    return posted_++;
}

void InFlight::complete_front() {
    {
        Op op = std::move(ops_.front());
        ops_.pop_front();
        ++completed_;
        if (op.on_done) op.on_done();
    }  // freeing the operation's buffers counts as communication time too
    account_idle();
}

void InFlight::account_idle() {
    if (!ops_.empty()) return;
    times_.outstanding_s += seconds(Clock::now() - busy_since_);
}

void InFlight::poll() {
    if (ops_.empty()) return;
    auto start = Clock::now();
    for (Op& op : ops_)
        if (!op.done) op.done = op.request.test();
    while (!ops_.empty() && ops_.front().done) complete_front();
    times_.blocked_s += seconds(Clock::now() - start);
}

void InFlight::wait(uint64_t ticket) {
    if (done(ticket)) return;
    auto start = Clock::now();
    while (!done(ticket)) {
        ops_.front().request.wait();
        complete_front();
    }
    times_.blocked_s += seconds(Clock::now() - start);
}

void InFlight::wait_all() {
    if (posted_ > 0) wait(posted_ - 1);
}

OverlapTimes InFlight::take_times() {
    OverlapTimes t = times_;
    times_ = {};
    if (!ops_.empty()) {  // split the current busy interval at now
        auto now = Clock::now();
        t.outstanding_s += seconds(now - busy_since_);
        busy_since_ = now;
    }
    return t;
}

}  // namespace weft::parallel
