#pragma once
// Communication accounting: every call on a Group is counted here, per group (a mesh axis or a
// combination of axes) and per kind of operation. docs/comm.md defines every field; in short:
//
//   bytes      S, the size of the whole logical buffer the operation works on: the all-reduce
//              and broadcast buffer, the reduce-scatter input, the all-gather output, what this
//              rank passes to all-to-all (its send buffer), the send or receive buffer.
//              (The nccl-tests convention for "size".) 0 on a group of size 1.
//   bus_bytes  what this rank puts on the wire under the reference algorithm: ring all-reduce
//              2(n-1)/n·S, ring reduce-scatter and all-gather (n-1)/n·S, pipelined-chain
//              broadcast (n-1)/n·S (mean over ranks), all-to-all (n-1)/n·S (the blocks for other
//              ranks; all-to-all-v: exactly the elements sent to other ranks), send S, recv 0.
//              Summed over a group's ranks it is the total traffic of the operation. It is a
//              double because 2(n-1)/n·S is not whole when n does not divide S; it is exact
//              whenever n divides the element count.
//   seconds    wall time inside the call (blocking: the whole operation; *_async: only posting)
//   wait_seconds  for *_async operations, wall time blocked in Request::wait/test afterwards.
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace weft::comm {

enum class Op {
    all_reduce,
    reduce_scatter,
    all_gather,
    all_to_all,
    broadcast,
    send,
    recv,
    barrier
};
inline constexpr int kOpCount = 8;
std::string_view op_name(Op op);

struct OpStats {
    uint64_t calls = 0;
    uint64_t bytes = 0;
    double bus_bytes = 0;
    double seconds = 0;
    double wait_seconds = 0;

    OpStats& operator+=(const OpStats& other);
};

struct GroupStats {
    std::string name;  // "tp", "dp", ..., or a combined group such as "cp*dp"
    int size = 1;
    std::array<OpStats, kOpCount> ops{};

    OpStats& operator[](Op op) { return ops[static_cast<int>(op)]; }
    const OpStats& operator[](Op op) const { return ops[static_cast<int>(op)]; }
    OpStats total() const;
};

// A snapshot of one rank's counters for every group of a Mesh.
struct CommStats {
    std::vector<GroupStats> groups;

    const GroupStats* find(std::string_view name) const;
    // {"dp": {"size": 4, "total": {...}, "all_reduce": {"calls", "bytes", "bus_bytes",
    //  "seconds", "wait_seconds"}, ...}, ...}; operations never called are left out.
    nlohmann::json to_json() const;
    // One row per group and operation that was called, for logs.
    std::string table() const;
};

}  // namespace weft::comm
