#include "weft/parallel/context_parallel.hpp"

#include <span>

namespace weft::parallel {

void GroupCpComm::start_shift(const float* send, float* recv, int64_t n) {
    const int p = size(), r = rank();
    // Receive first, so that the matching send never waits on an unposted receive.
    recv_ = comm::recv_async(group_, std::span<float>(recv, size_t(n)), (r + p - 1) % p);
    send_ = comm::send_async(group_, std::span<const float>(send, size_t(n)), (r + 1) % p);
}

void GroupCpComm::wait_shift() {
    recv_.wait();
    send_.wait();
}

void GroupCpComm::all_to_all(const float* in, float* out, int64_t n) {
    const size_t all = size_t(n) * size_t(size());
    comm::all_to_all(group_, std::span<const float>(in, all), std::span<float>(out, all));
}

}  // namespace weft::parallel
