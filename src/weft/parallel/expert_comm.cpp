#include "weft/parallel/expert_comm.hpp"

#include <limits>
#include <span>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"

namespace weft::parallel {

void GroupExpertComm::exchange_counts(const int64_t* send, int64_t* recv, int64_t n) {
    const size_t total = size_t(n) * size_t(size());
    comm::all_to_all(group_, std::span<const int64_t>(send, total),
                     std::span<int64_t>(recv, total));
}

void GroupExpertComm::exchange_rows(const float* send, const int64_t* send_rows, float* recv,
                                    const int64_t* recv_rows, int64_t width) {
    const int n = size();
    send_counts_.assign(size_t(n), 0);
    send_displs_.assign(size_t(n), 0);
    recv_counts_.assign(size_t(n), 0);
    recv_displs_.assign(size_t(n), 0);
    // MPI counts are int: an exchange of more than 2^31 floats per rank is refused by name.
    auto to_int = [](int64_t v) {
        WEFT_CHECK(v <= std::numeric_limits<int>::max(),
                   "expert-parallel exchange of {} floats exceeds MPI's int counts", v);
        return int(v);
    };
    int64_t sent = 0, received = 0;
    for (int j = 0; j < n; ++j) {
        send_displs_[size_t(j)] = to_int(sent);
        send_counts_[size_t(j)] = to_int(send_rows[j] * width);
        sent += send_rows[j] * width;
        recv_displs_[size_t(j)] = to_int(received);
        recv_counts_[size_t(j)] = to_int(recv_rows[j] * width);
        received += recv_rows[j] * width;
    }
    comm::all_to_all_v(group_, std::span<const float>(send, size_t(sent)), send_counts_,
                       send_displs_, std::span<float>(recv, size_t(received)), recv_counts_,
                       recv_displs_);
}

void GroupMoeComm::sum_counts(double* counts, int64_t n) {
    comm::all_reduce(group_, std::span<double>(counts, size_t(n)));
}

}  // namespace weft::parallel
