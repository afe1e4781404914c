#pragma once
// The handle of a non-blocking operation. The buffers passed to the operation must stay alive and
// untouched until it is done (wait() returned or test() returned true).
#include <memory>
#include <span>

namespace weft::comm {

namespace detail {
struct Pending;
}

class Request {
  public:
    Request();  // an operation that is already done
    explicit Request(std::unique_ptr<detail::Pending> pending);
    // Waits if still pending (bounded by the watchdog), as the buffers are in MPI's hands.
    ~Request();
    Request(Request&& other) noexcept;
    Request& operator=(Request&& other) noexcept;  // waits for the operation it replaces

    // Blocks until done, at most the mesh's timeout: then the watchdog ends the job. The time
    // blocked is counted as the operation's wait_seconds.
    void wait();
    // Drives MPI's progress once and says whether the operation is done. MPI progresses only
    // inside MPI calls: to overlap communication with compute, call test() now and then.
    bool test();
    bool done() const { return pending_ == nullptr; }

  private:
    std::unique_ptr<detail::Pending> pending_;
};

// Waits for each in turn (each wait bounded by the watchdog).
void wait_all(std::span<Request> requests);

}  // namespace weft::comm
