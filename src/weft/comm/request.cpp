#include "weft/comm/request.hpp"

#include <fmt/format.h>

#include <chrono>

#include "weft/comm/detail.hpp"
#include "weft/comm/mpi_env.hpp"

namespace weft::comm {

namespace {

using Clock = std::chrono::steady_clock;

// Books the time spent waiting and checks what a recv got.
void finish(detail::Pending& p, const MPI_Status& status, double seconds, bool done) {
    OpStats& s = detail::Access::stats(*p.group)[p.info.op];
    (p.blocking ? s.seconds : s.wait_seconds) += seconds;
    if (!done || p.expect_count < 0) return;
    int count = 0;
    MPI_Get_count(&status, p.type, &count);
    if (count != p.expect_count) {
        abort_job(fmt::format("recv from rank {} on {}: got {} elements of {}, expected {}",
                              p.info.peer, p.group->name(), count, p.info.dtype, p.expect_count));
    }
}

}  // namespace

Request::Request() = default;
Request::Request(std::unique_ptr<detail::Pending> pending) : pending_(std::move(pending)) {}
Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
    if (this != &other) {
        wait();
        pending_ = std::move(other.pending_);
    }
    return *this;
}

Request::~Request() {
    wait();
}

void Request::wait() {
    if (!pending_) return;
    detail::Pending& p = *pending_;
    auto start = Clock::now();
    MPI_Status status;
    const auto stop = detail::Access::watchdog(*p.group).wait(p.request, p.info, &status);
    detail::Access::flight(*p.group).end(p.record, stop);
    finish(p, status, std::chrono::duration<double>(stop - start).count(), true);
    pending_.reset();
}

bool Request::test() {
    if (!pending_) return true;
    detail::Pending& p = *pending_;
    auto start = Clock::now();
    int done = 0;
    MPI_Status status;
    detail::check_mpi(MPI_Test(&p.request, &done, &status), "MPI_Test",
                      fmt::format("{} on {}", op_name(p.info.op), p.group->name()));
    // A rank that polls between computations can tell an asking watchdog it is alive.
    detail::Access::watchdog(*p.group).service();
    const auto stop = Clock::now();
    if (done) detail::Access::flight(*p.group).end(p.record, stop);
    finish(p, status, std::chrono::duration<double>(stop - start).count(), done);
    if (done) pending_.reset();
    return done;
}

void wait_all(std::span<Request> requests) {
    for (Request& r : requests) r.wait();
}

}  // namespace weft::comm
