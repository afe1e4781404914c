#pragma once
// The flight recorder: this rank's last kFlightEntries communication operations in a fixed ring
// (operation, group, number on the group, bytes, peer, start and end), and the time the rank spent
// blocked waiting for them. When a job hangs, the dumps of all ranks show who stopped where (C4:
// collective anomalies are how faults are found); the blocked time per step is what slow-rank
// diagnosis compares across ranks (train/slow_rank.hpp).
//
// Recording allocates nothing and costs a few stores per operation. Dumping is async-signal-safe
// (the entries are plain data, formatted by hand and written with write(2)), so a signal handler
// may dump (flight_signals.hpp). docs/comm.md gives the JSON schema; a supervisor reads it.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "weft/comm/stats.hpp"

namespace weft::comm {

inline constexpr int kFlightEntries = 256;

// One operation, as the watchdog and the recorder describe it.
struct FlightOp {
    Op op = Op::barrier;
    int group = -1;      // index in the mesh's group list
    uint64_t seq = 0;    // collectives: number of the operation on the group; send/recv: 0
    int peer = -1;       // send/recv: the peer's world rank; -1 for collectives
    uint64_t bytes = 0;  // S, as stats.hpp defines it
};

// A recorded operation as read back (a copy: the ring itself keeps changing).
struct FlightEntry {
    FlightOp op;
    double start_s = 0;  // seconds since the recorder (the mesh) started
    double end_s = -1;   // negative while the operation is in flight
};

enum class FlightReason { timeout, signal };
std::string_view flight_reason_name(FlightReason reason);

class FlightRecorder {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr int kMaxGroups = 32;
    static constexpr int kNameLength = 24;

    // dir: where dump() writes rank_<world_rank>.json; empty: dump() writes nothing.
    explicit FlightRecorder(int world_rank, std::string dir = {});
    FlightRecorder(const FlightRecorder&) = delete;
    FlightRecorder& operator=(const FlightRecorder&) = delete;

    // The name the dump gives group `index` (names past kNameLength - 1 characters are cut).
    void name_group(int index, std::string_view name);

    // Records that an operation started; the returned id is for end().
    uint64_t begin(const FlightOp& op, Clock::time_point start);
    // Records that operation `id` finished; nothing if the ring has since dropped it.
    void end(uint64_t id, Clock::time_point end);

    // The rank is blocked in `op` from `since` (the watchdog's wait), or no longer blocked. The
    // blocked operation is what a dump names, and the time blocked adds up in blocked_seconds().
    void block(const FlightOp& op, Clock::time_point since);
    void unblock(Clock::time_point now);
    // Seconds blocked in waits since the recorder started (only whole waits are counted).
    double blocked_seconds() const { return blocked_s_; }

    uint64_t recorded() const { return count_.load(std::memory_order_acquire); }
    // Seconds since the recorder started, on the clock of the entries' start_s and end_s.
    double now_s() const { return since_start(Clock::now()); }
    // The name group `index` was given ("" if none).
    std::string_view group_name(int index) const {
        return index >= 0 && index < kMaxGroups ? std::string_view(names_[size_t(index)].data())
                                                : std::string_view();
    }
    // The entries held, oldest first (at most kFlightEntries).
    std::array<FlightEntry, kFlightEntries> entries(int* n) const;

    // Writes the JSON document to a file descriptor. Async-signal-safe. blocked may be null.
    bool write_json(int fd, FlightReason reason, const FlightOp* blocked) const;
    // Writes <dir>/rank_<r>.json (creating dir; through a temporary and a rename, so a reader
    // never sees half a file). Async-signal-safe. Returns false without a dir or on failure. A
    // signal dump does not replace a timeout dump: the timeout's is the one that explains the
    // job's end (the abort that follows it sends the ranks SIGTERM).
    bool dump(FlightReason reason, const FlightOp* blocked);
    // dump() naming what the rank is blocked in now (for the signal handler).
    bool dump_now(FlightReason reason);

    const std::string& dir() const { return dir_; }
    const std::string& path() const { return path_; }

  private:
    struct Slot {
        FlightOp op;
        double start_s = 0;
        std::atomic<double> end_s{-1.0};
    };
    double since_start(Clock::time_point t) const {
        return std::chrono::duration<double>(t - epoch_).count();
    }

    const int rank_;
    const Clock::time_point epoch_;
    const std::string dir_, path_, temp_path_;
    std::array<std::array<char, kNameLength>, kMaxGroups> names_{};
    std::array<Slot, kFlightEntries> ring_;
    std::atomic<uint64_t> count_{0};
    FlightOp blocked_;
    std::atomic<bool> is_blocked_{false};
    Clock::time_point blocked_since_;
    double blocked_s_ = 0;
    std::atomic<bool> timeout_dumped_{false};
};

}  // namespace weft::comm
