#include "weft/offload/io_ring.hpp"

#include <liburing.h>

#include <cstring>

#include "weft/core/error.hpp"

namespace weft::offload {

struct IoRing::Impl {
    io_uring ring;
};

IoRing::IoRing(unsigned depth) : impl_(std::make_unique<Impl>()) {
    const int r = io_uring_queue_init(depth, &impl_->ring, 0);
    WEFT_CHECK(r == 0,
               "offload: io_uring is not available ({}); expected a Linux kernel of 5.6 or later "
               "that allows io_uring (/proc/sys/kernel/io_uring_disabled 0)",
               std::strerror(-r));
}

IoRing::~IoRing() {
    // A caller that failed midway may leave transfers in flight: their buffers are about to be
    // freed, so they are waited for before the ring goes.
    while (in_flight_ > 0) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(&impl_->ring, &cqe) < 0) break;
        io_uring_cqe_seen(&impl_->ring, cqe);
        --in_flight_;
    }
    io_uring_queue_exit(&impl_->ring);
}

namespace {

io_uring_sqe* next_sqe(io_uring& ring) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe) return sqe;
    io_uring_submit(&ring);  // the queue is full: hand it over and take a fresh entry
    sqe = io_uring_get_sqe(&ring);
    WEFT_CHECK(sqe, "internal: io_uring submission queue full after a submit");
    return sqe;
}

}  // namespace

void IoRing::read(int fd, void* buf, size_t bytes, int64_t offset, uint64_t tag) {
    io_uring_sqe* sqe = next_sqe(impl_->ring);
    io_uring_prep_read(sqe, fd, buf, unsigned(bytes), uint64_t(offset));
    io_uring_sqe_set_data64(sqe, tag);
    ++in_flight_;
}

void IoRing::write(int fd, const void* buf, size_t bytes, int64_t offset, uint64_t tag) {
    io_uring_sqe* sqe = next_sqe(impl_->ring);
    io_uring_prep_write(sqe, fd, buf, unsigned(bytes), uint64_t(offset));
    io_uring_sqe_set_data64(sqe, tag);
    ++in_flight_;
}

void IoRing::submit() {
    const int r = io_uring_submit(&impl_->ring);
    WEFT_CHECK(r >= 0, "offload: io_uring submit failed: {}", std::strerror(-r));
}

IoRing::Completion IoRing::wait() {
    WEFT_CHECK(in_flight_ > 0, "internal: waiting on an io_uring with nothing in flight");
    io_uring_cqe* cqe = nullptr;
    int r;
    do r = io_uring_submit_and_wait(&impl_->ring, 1);
    while (r == -EINTR);
    WEFT_CHECK(r >= 0, "offload: io_uring wait failed: {}", std::strerror(-r));
    r = io_uring_peek_cqe(&impl_->ring, &cqe);
    WEFT_CHECK(r == 0 && cqe, "offload: io_uring returned no completion: {}", std::strerror(-r));
    const Completion c{io_uring_cqe_get_data64(cqe), cqe->res};
    io_uring_cqe_seen(&impl_->ring, cqe);
    --in_flight_;
    return c;
}

std::optional<IoRing::Completion> IoRing::peek() {
    if (in_flight_ == 0) return std::nullopt;
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&impl_->ring, &cqe) != 0 || !cqe) return std::nullopt;
    const Completion c{io_uring_cqe_get_data64(cqe), cqe->res};
    io_uring_cqe_seen(&impl_->ring, cqe);
    --in_flight_;
    return c;
}

}  // namespace weft::offload
