#pragma once
// Asynchronous file reads and writes through one io_uring (Debian's liburing): requests are
// queued, submitted together with one system call, and run by the kernel while the caller
// computes; completions come back tagged. With files opened O_DIRECT the transfers go between
// the caller's buffers and the device, neither copied nor left in the page cache, so that the
// optimizer state streamed through (offload/streamed_state.hpp) costs no memory beyond its pool.
// Not thread-safe: one thread queues and reaps.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace weft::offload {

class IoRing {
  public:
    // Room for `depth` requests in flight.
    explicit IoRing(unsigned depth);
    ~IoRing();
    IoRing(const IoRing&) = delete;
    IoRing& operator=(const IoRing&) = delete;

    // Queues a transfer of `bytes` between `buf` and `fd` at `offset`; `tag` comes back with its
    // completion. Under O_DIRECT, buf, bytes and offset must be multiples of the block size.
    void read(int fd, void* buf, size_t bytes, int64_t offset, uint64_t tag);
    void write(int fd, const void* buf, size_t bytes, int64_t offset, uint64_t tag);
    // Hands every queued request to the kernel.
    void submit();

    struct Completion {
        uint64_t tag;
        int64_t result;  // bytes transferred, or -errno
    };
    // Waits for the next completion (submitting what is queued first).
    Completion wait();
    // The next completion if one has arrived, without waiting.
    std::optional<Completion> peek();
    // Requests queued or submitted whose completion has not been returned by wait().
    int in_flight() const { return in_flight_; }

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int in_flight_ = 0;
};

}  // namespace weft::offload
