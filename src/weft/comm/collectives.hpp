#pragma once
// Collectives and point-to-point messages on a Group (a mesh axis: mesh.group(Axis::dp)).
//
// Every operation comes blocking and non-blocking (*_async, returning a Request). Blocking ones
// are the non-blocking ones followed by a watched wait, so no call can block longer than the
// mesh's timeout. All ranks of the group must call the same collectives in the same order with
// matching sizes; sizes are checked on each rank, and a bad one throws weft::Error before any
// MPI call. On a group of size 1 nothing reaches MPI (outputs are copied where needed).
// Ranks (root, peer) are group ranks, i.e. coordinates on the axis. Sizes are in elements and
// must each fit MPI's int count. Element types: float, double, int32_t, int64_t; operations
// that only move data also take std::byte. Every call is counted in the group's GroupStats
// (stats.hpp defines bytes, bus bytes and times).
#include <cstddef>
#include <cstdint>
#include <span>

#include "weft/comm/mesh.hpp"
#include "weft/comm/request.hpp"

namespace weft::comm {

enum class ReduceOp { sum, max, min };

// all_reduce:        data = op over the group of every rank's data (in place).
// reduce_scatter:    in holds size() equal blocks; out (one block) = op over the group of every
//                    rank's block number rank(). in and out must not overlap.
// all_gather:        out = every rank's in, in rank order; out has size() * in.size() elements.
//                    in may be this rank's own block of out (in place), else must not overlap it.
// all_to_all:        block j of in goes to rank j, which stores it as its block number rank();
//                    in and out have the same size, a multiple of size(); no overlap.
// all_to_all_v:      as all_to_all with per-rank counts and displacements (elements), one each
//                    per rank of the group, as MPI_Alltoallv.
// broadcast:         data = root's data.
// send / recv:       to / from group rank peer (not this rank), with a tag in 0..32767; recv
//                    requires exactly data.size() elements to arrive.
#define WEFT_COMM_REDUCING_OPS(T)                                                           \
    void all_reduce(Group& group, std::span<T> data, ReduceOp op = ReduceOp::sum);          \
    Request all_reduce_async(Group& group, std::span<T> data, ReduceOp op = ReduceOp::sum); \
    void reduce_scatter(Group& group, std::span<const T> in, std::span<T> out,              \
                        ReduceOp op = ReduceOp::sum);                                       \
    Request reduce_scatter_async(Group& group, std::span<const T> in, std::span<T> out,     \
                                 ReduceOp op = ReduceOp::sum);
#define WEFT_COMM_MOVING_OPS(T)                                                                    \
    void all_gather(Group& group, std::span<const T> in, std::span<T> out);                        \
    Request all_gather_async(Group& group, std::span<const T> in, std::span<T> out);               \
    void all_to_all(Group& group, std::span<const T> in, std::span<T> out);                        \
    Request all_to_all_async(Group& group, std::span<const T> in, std::span<T> out);               \
    void all_to_all_v(Group& group, std::span<const T> in, std::span<const int> send_counts,       \
                      std::span<const int> send_displs, std::span<T> out,                          \
                      std::span<const int> recv_counts, std::span<const int> recv_displs);         \
    Request all_to_all_v_async(Group& group, std::span<const T> in,                                \
                               std::span<const int> send_counts, std::span<const int> send_displs, \
                               std::span<T> out, std::span<const int> recv_counts,                 \
                               std::span<const int> recv_displs);                                  \
    void broadcast(Group& group, std::span<T> data, int root);                                     \
    Request broadcast_async(Group& group, std::span<T> data, int root);                            \
    void send(Group& group, std::span<const T> data, int peer, int tag = 0);                       \
    Request send_async(Group& group, std::span<const T> data, int peer, int tag = 0);              \
    void recv(Group& group, std::span<T> data, int peer, int tag = 0);                             \
    Request recv_async(Group& group, std::span<T> data, int peer, int tag = 0);

WEFT_COMM_REDUCING_OPS(float)
WEFT_COMM_REDUCING_OPS(double)
WEFT_COMM_REDUCING_OPS(int32_t)
WEFT_COMM_REDUCING_OPS(int64_t)
WEFT_COMM_MOVING_OPS(float)
WEFT_COMM_MOVING_OPS(double)
WEFT_COMM_MOVING_OPS(int32_t)
WEFT_COMM_MOVING_OPS(int64_t)
WEFT_COMM_MOVING_OPS(std::byte)
#undef WEFT_COMM_REDUCING_OPS
#undef WEFT_COMM_MOVING_OPS

void barrier(Group& group);
Request barrier_async(Group& group);

}  // namespace weft::comm
