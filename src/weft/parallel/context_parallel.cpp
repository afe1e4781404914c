#include "weft/parallel/context_parallel.hpp"

#include <span>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::parallel {

GroupCpComm::GroupCpComm(comm::Group& group, int first, int stride, int size)
    : group_(group), first_(first), stride_(stride), size_(size), rank_(0) {
    const int r = group.rank() - first;
    WEFT_CHECK(size >= 1 && stride >= 1 && r >= 0 && r % stride == 0 && r / stride < size &&
                   first + stride * (size - 1) < group.size(),
               "internal: cp rank {} outside the view of {} ranks from {} by {} of a group of {}",
               group.rank(), size, first, stride, group.size());
    rank_ = r / stride;
}

template <class T>
void GroupCpComm::shift(const T* send, T* recv, int64_t n) {
    // Receive first, so that the matching send never waits on an unposted receive.
    recv_ = comm::recv_async(group_, std::span<T>(recv, size_t(n)), member(rank_ - 1));
    send_ = comm::send_async(group_, std::span<const T>(send, size_t(n)), member(rank_ + 1));
}

void GroupCpComm::start_shift(const float* send, float* recv, int64_t n) {
    shift(send, recv, n);
}

void GroupCpComm::start_shift(const uint16_t* send, uint16_t* recv, int64_t n) {
    // bf16 as bytes: comm has no 16-bit type.
    shift(reinterpret_cast<const std::byte*>(send), reinterpret_cast<std::byte*>(recv), 2 * n);
}

void GroupCpComm::wait_shift() {
    recv_.wait();
    send_.wait();
}

// Returns carry their own tag so that they never match a shift between the same two ranks (at
// cp 2 both go to the other rank).
constexpr int kReturnTag = 1;

void GroupCpComm::start_return(const float* send, float* recv, int64_t n, int hops) {
    return_recv_ = comm::recv_async(group_, std::span<float>(recv, size_t(n)), member(rank_ + hops),
                                    kReturnTag);
    return_send_ = comm::send_async(group_, std::span<const float>(send, size_t(n)),
                                    member(rank_ - hops), kReturnTag);
}

void GroupCpComm::wait_return() {
    return_recv_.wait();
    return_send_.wait();
}

template <class T>
void GroupCpComm::exchange(const T* in, T* out, int64_t n) {
    const size_t all = size_t(n) * size_t(size_);
    if (size_ == group_.size()) {
        comm::all_to_all(group_, std::span<const T>(in, all), std::span<T>(out, all));
        return;
    }
    // Every view of the group makes this call at the same time (the hybrid's Ulysses groups run
    // in step), so it is one collective over the whole group with nothing between views.
    std::vector<int> counts(size_t(group_.size()), 0), displs(size_t(group_.size()), 0);
    for (int j = 0; j < size_; ++j) {
        counts[size_t(member(j))] = int(n);
        displs[size_t(member(j))] = int(n * j);
    }
    comm::all_to_all_v(group_, std::span<const T>(in, all), counts, displs, std::span<T>(out, all),
                       counts, displs);
}

void GroupCpComm::all_to_all(const float* in, float* out, int64_t n) {
    exchange(in, out, n);
}

void GroupCpComm::all_to_all(const uint16_t* in, uint16_t* out, int64_t n) {
    // bf16 as bytes: comm has no 16-bit type.
    exchange(reinterpret_cast<const std::byte*>(in), reinterpret_cast<std::byte*>(out), 2 * n);
}

CpComms make_cp_comms(comm::Group& cp, CpKind kind, int cp_ulysses) {
    CpComms c;
    if (cp.size() == 1) return c;
    if (kind != CpKind::hybrid) {
        c.main = std::make_unique<GroupCpComm>(cp);
        return c;
    }
    const int U = cp_ulysses, r = cp.rank();
    c.main = std::make_unique<GroupCpComm>(cp, r / U * U, 1, U);
    c.ring = std::make_unique<GroupCpComm>(cp, r % U, U, cp.size() / U);
    return c;
}

}  // namespace weft::parallel
