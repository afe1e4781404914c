#include "weft/comm/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <numeric>

#include "weft/comm/detail.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace {

using Clock = std::chrono::steady_clock;
using detail::Access;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum:
            return MPI_SUM;
        case ReduceOp::max:
            return MPI_MAX;
        case ReduceOp::min:
            return MPI_MIN;
    }
    return MPI_SUM;
}

std::string where(const Group& g, Op op) {
    return fmt::format("{} on {} (group rank {} of {})", op_name(op), g.name(), g.rank(), g.size());
}

int mpi_count(size_t n, const Group& g, Op op) {
    WEFT_CHECK(n <= size_t(INT_MAX), "{}: {} elements exceed MPI's int count limit {}; split it",
               where(g, op), n, INT_MAX);
    return int(n);
}

template <class A, class B>
bool overlap(std::span<A> a, std::span<B> b) {
    auto* a0 = reinterpret_cast<const std::byte*>(a.data());
    auto* b0 = reinterpret_cast<const std::byte*>(b.data());
    return a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes() && !a.empty() && !b.empty();
}

// A group of one: nothing reaches MPI; the call is still counted, with 0 bytes.
template <class Copy>
Request local(Group& g, Op op, Copy&& copy) {
    auto start = Clock::now();
    copy();
    OpStats& s = Access::stats(g)[op];
    s.calls += 1;
    s.seconds += seconds_since(start);
    return Request();
}

// Numbers, books and posts one operation; a blocking call then waits for it (watched).
// start(comm, arrays, request) makes the MPI call; arrays are the Pending's stable copies.
template <class T, class Start>
Request post(Group& g, Op op, uint64_t bytes, double bus_bytes, int peer, bool blocking,
             Start&& start, std::vector<int> arrays = {}, int expect_count = -1) {
    auto begin = Clock::now();
    auto p = std::make_unique<detail::Pending>();
    p->group = &g;
    p->blocking = blocking;
    p->type = detail::mpi_type<T>();
    p->expect_count = expect_count;
    p->arrays = std::move(arrays);
    const bool p2p = op == Op::send || op == Op::recv;
    p->info = {
        {op, Access::index(g), p2p ? 0 : Access::next_seq(g), p2p ? g.members()[peer] : -1, bytes},
        detail::type_name<T>()};
    detail::check_mpi(start(Access::comm(g), p->arrays, &p->request), op_name(op).data(),
                      where(g, op));
    p->record = Access::flight(g).begin(p->info, begin);
    OpStats& s = Access::stats(g)[op];
    s.calls += 1;
    s.bytes += bytes;
    s.bus_bytes += bus_bytes;
    s.seconds += seconds_since(begin);
    Request request(std::move(p));
    if (blocking) request.wait();
    return request;
}

template <class T>
Request all_reduce_impl(Group& g, std::span<T> data, ReduceOp op, bool blocking) {
    int count = mpi_count(data.size(), g, Op::all_reduce);
    if (g.size() == 1) return local(g, Op::all_reduce, [] {});
    const int n = g.size();
    const uint64_t S = data.size_bytes();
    return post<T>(g, Op::all_reduce, S, 2.0 * (n - 1) * double(S) / n, -1, blocking,
                   [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       return MPI_Iallreduce(MPI_IN_PLACE, data.data(), count,
                                             detail::mpi_type<T>(), mpi_op(op), c, r);
                   });
}

template <class T>
Request reduce_scatter_impl(Group& g, std::span<const T> in, std::span<T> out, ReduceOp op,
                            bool blocking) {
    const int n = g.size();
    WEFT_CHECK(in.size() == out.size() * n,
               "{}: input has {} elements, expected {} ranks x {} output elements = {}",
               where(g, Op::reduce_scatter), in.size(), n, out.size(), out.size() * n);
    WEFT_CHECK(!overlap(in, out), "{}: input and output overlap, expected separate buffers",
               where(g, Op::reduce_scatter));
    int count = mpi_count(out.size(), g, Op::reduce_scatter);
    if (n == 1)
        return local(g, Op::reduce_scatter, [&] { std::copy(in.begin(), in.end(), out.begin()); });
    return post<T>(g, Op::reduce_scatter, in.size_bytes(), double((n - 1) * out.size_bytes()), -1,
                   blocking, [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       return MPI_Ireduce_scatter_block(in.data(), out.data(), count,
                                                        detail::mpi_type<T>(), mpi_op(op), c, r);
                   });
}

template <class T>
Request all_gather_impl(Group& g, std::span<const T> in, std::span<T> out, bool blocking) {
    const int n = g.size();
    WEFT_CHECK(out.size() == in.size() * n,
               "{}: output has {} elements, expected {} ranks x {} input elements = {}",
               where(g, Op::all_gather), out.size(), n, in.size(), in.size() * n);
    // In place (MPI_IN_PLACE) when the input is this rank's own block of the output, the ZeRO
    // pattern of gathering shards into the full buffer that holds this rank's shard.
    const bool in_place = !in.empty() && in.data() == out.data() + g.rank() * in.size();
    WEFT_CHECK(in_place || !overlap(in, out),
               "{}: input overlaps the output but is not this rank's block {} of it",
               where(g, Op::all_gather), g.rank());
    int count = mpi_count(in.size(), g, Op::all_gather);
    if (n == 1) {
        return local(g, Op::all_gather, [&] {
            if (!in_place) std::copy(in.begin(), in.end(), out.begin());
        });
    }
    return post<T>(g, Op::all_gather, out.size_bytes(), double((n - 1) * in.size_bytes()), -1,
                   blocking, [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       MPI_Datatype t = detail::mpi_type<T>();
                       return MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data(), count, t,
                                             out.data(), count, t, c, r);
                   });
}

template <class T>
Request all_to_all_impl(Group& g, std::span<const T> in, std::span<T> out, bool blocking) {
    const int n = g.size();
    WEFT_CHECK(in.size() == out.size() && in.size() % n == 0,
               "{}: input has {} and output {} elements, expected equal sizes divisible by {}",
               where(g, Op::all_to_all), in.size(), out.size(), n);
    WEFT_CHECK(!overlap(in, out), "{}: input and output overlap, expected separate buffers",
               where(g, Op::all_to_all));
    const size_t block = in.size() / n;
    int count = mpi_count(block, g, Op::all_to_all);
    if (n == 1)
        return local(g, Op::all_to_all, [&] { std::copy(in.begin(), in.end(), out.begin()); });
    return post<T>(g, Op::all_to_all, in.size_bytes(), double((n - 1) * block * sizeof(T)), -1,
                   blocking, [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       MPI_Datatype t = detail::mpi_type<T>();
                       return MPI_Ialltoall(in.data(), count, t, out.data(), count, t, c, r);
                   });
}

// Checks one side of an all_to_all_v: a count and displacement per rank, inside the buffer.
void check_blocks(const Group& g, const char* side, std::span<const int> counts,
                  std::span<const int> displs, size_t buffer) {
    const size_t n = size_t(g.size());
    WEFT_CHECK(counts.size() == n && displs.size() == n,
               "{}: {} has {} counts and {} displacements, expected one each per rank ({})",
               where(g, Op::all_to_all), side, counts.size(), displs.size(), n);
    for (size_t j = 0; j < n; ++j) {
        WEFT_CHECK(counts[j] >= 0 && displs[j] >= 0 && size_t(displs[j]) + counts[j] <= buffer,
                   "{}: {} block {} (count {}, displacement {}) does not fit the {} elements of "
                   "the buffer",
                   where(g, Op::all_to_all), side, j, counts[j], displs[j], buffer);
    }
}

template <class T>
Request all_to_all_v_impl(Group& g, std::span<const T> in, std::span<const int> send_counts,
                          std::span<const int> send_displs, std::span<T> out,
                          std::span<const int> recv_counts, std::span<const int> recv_displs,
                          bool blocking) {
    check_blocks(g, "send", send_counts, send_displs, in.size());
    check_blocks(g, "recv", recv_counts, recv_displs, out.size());
    WEFT_CHECK(!overlap(in, out), "{}: input and output overlap, expected separate buffers",
               where(g, Op::all_to_all));
    const int me = g.rank();
    WEFT_CHECK(send_counts[me] == recv_counts[me],
               "{}: sends {} elements to itself but expects to receive {}",
               where(g, Op::all_to_all), send_counts[me], recv_counts[me]);
    if (g.size() == 1) {
        return local(g, Op::all_to_all, [&] {
            std::copy_n(in.begin() + send_displs[0], send_counts[0], out.begin() + recv_displs[0]);
        });
    }
    const uint64_t sent = std::accumulate(send_counts.begin(), send_counts.end(), uint64_t(0));
    std::vector<int> arrays;
    for (auto s : {send_counts, send_displs, recv_counts, recv_displs})
        arrays.insert(arrays.end(), s.begin(), s.end());
    const size_t n = size_t(g.size());
    return post<T>(
        g, Op::all_to_all, sent * sizeof(T), double((sent - send_counts[me]) * sizeof(T)), -1,
        blocking,
        [&](MPI_Comm c, std::vector<int>& a, MPI_Request* r) {
            MPI_Datatype t = detail::mpi_type<T>();
            return MPI_Ialltoallv(in.data(), a.data(), a.data() + n, t, out.data(),
                                  a.data() + 2 * n, a.data() + 3 * n, t, c, r);
        },
        std::move(arrays));
}

template <class T>
Request broadcast_impl(Group& g, std::span<T> data, int root, bool blocking) {
    const int n = g.size();
    WEFT_CHECK(root >= 0 && root < n, "{}: root {} is not a rank of the group, expected 0..{}",
               where(g, Op::broadcast), root, n - 1);
    int count = mpi_count(data.size(), g, Op::broadcast);
    if (n == 1) return local(g, Op::broadcast, [] {});
    const uint64_t S = data.size_bytes();
    return post<T>(g, Op::broadcast, S, double(n - 1) * double(S) / n, -1, blocking,
                   [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       return MPI_Ibcast(data.data(), count, detail::mpi_type<T>(), root, c, r);
                   });
}

void check_peer(const Group& g, Op op, int peer, int tag) {
    WEFT_CHECK(peer >= 0 && peer < g.size() && peer != g.rank(),
               "{}: peer {} is not another rank of the group, expected 0..{} except {}",
               where(g, op), peer, g.size() - 1, g.rank());
    WEFT_CHECK(tag >= 0 && tag <= 32767, "{}: tag {} is outside 0..32767", where(g, op), tag);
}

template <class T>
Request send_impl(Group& g, std::span<const T> data, int peer, int tag, bool blocking) {
    check_peer(g, Op::send, peer, tag);
    int count = mpi_count(data.size(), g, Op::send);
    return post<T>(g, Op::send, data.size_bytes(), double(data.size_bytes()), peer, blocking,
                   [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
                       return MPI_Isend(data.data(), count, detail::mpi_type<T>(), peer, tag, c, r);
                   });
}

template <class T>
Request recv_impl(Group& g, std::span<T> data, int peer, int tag, bool blocking) {
    check_peer(g, Op::recv, peer, tag);
    int count = mpi_count(data.size(), g, Op::recv);
    return post<T>(
        g, Op::recv, data.size_bytes(), 0.0, peer, blocking,
        [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) {
            return MPI_Irecv(data.data(), count, detail::mpi_type<T>(), peer, tag, c, r);
        },
        {}, count);
}

Request barrier_impl(Group& g, bool blocking) {
    if (g.size() == 1) return local(g, Op::barrier, [] {});
    return post<std::byte>(
        g, Op::barrier, 0, 0.0, -1, blocking,
        [&](MPI_Comm c, std::vector<int>&, MPI_Request* r) { return MPI_Ibarrier(c, r); });
}

}  // namespace

// The public overloads, one set per element type, forward to the templates above.
#define WEFT_COMM_DEFINE_REDUCING_OPS(T)                                                           \
    void all_reduce(Group& g, std::span<T> data, ReduceOp op) {                                    \
        all_reduce_impl<T>(g, data, op, true);                                                     \
    }                                                                                              \
    Request all_reduce_async(Group& g, std::span<T> data, ReduceOp op) {                           \
        return all_reduce_impl<T>(g, data, op, false);                                             \
    }                                                                                              \
    void reduce_scatter(Group& g, std::span<const T> in, std::span<T> out, ReduceOp op) {          \
        reduce_scatter_impl<T>(g, in, out, op, true);                                              \
    }                                                                                              \
    Request reduce_scatter_async(Group& g, std::span<const T> in, std::span<T> out, ReduceOp op) { \
        return reduce_scatter_impl<T>(g, in, out, op, false);                                      \
    }
#define WEFT_COMM_DEFINE_MOVING_OPS(T)                                                             \
    void all_gather(Group& g, std::span<const T> in, std::span<T> out) {                           \
        all_gather_impl<T>(g, in, out, true);                                                      \
    }                                                                                              \
    Request all_gather_async(Group& g, std::span<const T> in, std::span<T> out) {                  \
        return all_gather_impl<T>(g, in, out, false);                                              \
    }                                                                                              \
    void all_to_all(Group& g, std::span<const T> in, std::span<T> out) {                           \
        all_to_all_impl<T>(g, in, out, true);                                                      \
    }                                                                                              \
    Request all_to_all_async(Group& g, std::span<const T> in, std::span<T> out) {                  \
        return all_to_all_impl<T>(g, in, out, false);                                              \
    }                                                                                              \
    void all_to_all_v(Group& g, std::span<const T> in, std::span<const int> sc,                    \
                      std::span<const int> sd, std::span<T> out, std::span<const int> rc,          \
                      std::span<const int> rd) {                                                   \
        all_to_all_v_impl<T>(g, in, sc, sd, out, rc, rd, true);                                    \
    }                                                                                              \
    Request all_to_all_v_async(Group& g, std::span<const T> in, std::span<const int> sc,           \
                               std::span<const int> sd, std::span<T> out, std::span<const int> rc, \
                               std::span<const int> rd) {                                          \
        return all_to_all_v_impl<T>(g, in, sc, sd, out, rc, rd, false);                            \
    }                                                                                              \
    void broadcast(Group& g, std::span<T> data, int root) {                                        \
        broadcast_impl<T>(g, data, root, true);                                                    \
    }                                                                                              \
    Request broadcast_async(Group& g, std::span<T> data, int root) {                               \
        return broadcast_impl<T>(g, data, root, false);                                            \
    }                                                                                              \
    void send(Group& g, std::span<const T> data, int peer, int tag) {                              \
        send_impl<T>(g, data, peer, tag, true);                                                    \
    }                                                                                              \
    Request send_async(Group& g, std::span<const T> data, int peer, int tag) {                     \
        return send_impl<T>(g, data, peer, tag, false);                                            \
    }                                                                                              \
    void recv(Group& g, std::span<T> data, int peer, int tag) {                                    \
        recv_impl<T>(g, data, peer, tag, true);                                                    \
    }                                                                                              \
    Request recv_async(Group& g, std::span<T> data, int peer, int tag) {                           \
        return recv_impl<T>(g, data, peer, tag, false);                                            \
    }

WEFT_COMM_DEFINE_REDUCING_OPS(float)
WEFT_COMM_DEFINE_REDUCING_OPS(double)
WEFT_COMM_DEFINE_REDUCING_OPS(int32_t)
WEFT_COMM_DEFINE_REDUCING_OPS(int64_t)
WEFT_COMM_DEFINE_MOVING_OPS(float)
WEFT_COMM_DEFINE_MOVING_OPS(double)
WEFT_COMM_DEFINE_MOVING_OPS(int32_t)
WEFT_COMM_DEFINE_MOVING_OPS(int64_t)
WEFT_COMM_DEFINE_MOVING_OPS(std::byte)

void barrier(Group& g) {
    barrier_impl(g, true);
}
Request barrier_async(Group& g) {
    return barrier_impl(g, false);
}

}  // namespace weft::comm
