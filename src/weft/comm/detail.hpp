#pragma once
// Internal to weft::comm: the MPI handles behind Group and Mesh, and the watchdog. Not installed
// for other modules; this is the one header of comm that includes mpi.h.
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated C++ bindings, whose
// symbols live in libmpi_cxx, which MPI::MPI_C does not link.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/comm/flight_recorder.hpp"
#include "weft/comm/mesh.hpp"

namespace weft::comm::detail {

struct GroupComm {
    MPI_Comm comm = MPI_COMM_NULL;
};

// Reaches the private state of Group and Mesh from the collectives and the watchdog.
struct Access {
    static MPI_Comm comm(const Group& g) { return g.comm_->comm; }
    static int index(const Group& g) { return g.index_; }
    static uint64_t next_seq(Group& g) { return g.started_++; }
    static uint64_t started(const Group& g) { return g.started_; }
    static GroupStats& stats(Group& g) { return g.stats_; }
    static Watchdog& watchdog(const Group& g) { return *g.mesh_->watchdog_; }
    static FlightRecorder& flight(const Group& g) { return *g.mesh_->flight_; }
    static FlightRecorder& flight(Mesh& m) { return *m.flight_; }
};

// Aborts the job (an MPI failure on one rank leaves the others waiting) naming what failed.
void check_mpi(int code, const char* call, const std::string& context);

// What a rank is blocked in: for the watchdog's message, its answers to other ranks and the
// flight recorder (op, group, number, peer, bytes).
struct OpInfo : FlightOp {
    const char* dtype = "";  // for the message
};

// Bounded waiting. Every blocking wait in weft::comm goes through Watchdog::wait, which polls
// MPI_Test until the request completes or the mesh's timeout passes. On expiry it asks the
// other ranks of the group (over a communicator of its own) what they are doing, names the
// ranks that have not arrived, and calls MPI_Abort. Ranks answer those questions from inside
// their own waits, so every rank that is itself waiting in weft::comm answers; a rank that is
// dead, hung or computing does not. docs/comm.md has the whole protocol.
class Watchdog {
  public:
    Watchdog(Mesh& mesh, MPI_Comm world);
    ~Watchdog();

    // status may be null. Aborts the job when the mesh's timeout passes. Returns when the
    // operation was seen done (so the caller need not read the clock again).
    std::chrono::steady_clock::time_point wait(MPI_Request& request, const OpInfo& info,
                                               MPI_Status* status = nullptr);
    // Answers pending status queries; called from every wait loop.
    void service();

  private:
    struct Reply {
        std::array<int64_t, 6> data{};
        MPI_Request request = MPI_REQUEST_NULL;
    };
    struct Answer {  // what one queried rank said, or that it said nothing in time
        bool answered = false;
        std::array<int64_t, 6> data{};
    };

    [[noreturn]] void expire(const OpInfo& info, double waited);
    std::vector<Answer> ask(const std::vector<int>& ranks, const OpInfo& info, double grace);
    std::string describe_state(const std::array<int64_t, 6>& reply) const;
    std::string describe_op(const OpInfo& info) const;

    Mesh& mesh_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    const OpInfo* current_ = nullptr;
    bool queried_ = false;  // another rank's wait expired: the job is about to end
    std::vector<std::unique_ptr<Reply>> replies_;
};

// An operation posted to MPI that a Request has not yet waited for.
struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    Group* group = nullptr;
    OpInfo info;
    uint64_t record = 0;    // the flight recorder's id of the operation
    bool blocking = false;  // waiting time counts as the call's seconds, not wait_seconds
    int expect_count = -1;  // recv: elements that must arrive
    MPI_Datatype type = MPI_BYTE;
    std::vector<int> arrays;  // all_to_all_v counts and displacements: MPI reads them until done
};

// The MPI datatype and the name (for messages) of each element type the collectives accept.
template <class T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    if constexpr (std::is_same_v<T, int32_t>) return MPI_INT32_T;
    if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
    if constexpr (std::is_same_v<T, std::byte>) return MPI_BYTE;
}
template <class T>
const char* type_name() {
    if constexpr (std::is_same_v<T, float>) return "float32";
    if constexpr (std::is_same_v<T, double>) return "float64";
    if constexpr (std::is_same_v<T, int32_t>) return "int32";
    if constexpr (std::is_same_v<T, int64_t>) return "int64";
    if constexpr (std::is_same_v<T, std::byte>) return "bytes";
}

}  // namespace weft::comm::detail
