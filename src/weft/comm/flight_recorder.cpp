#include "weft/comm/flight_recorder.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace weft::comm {

namespace {

// Formats into a fixed buffer and writes it out with write(2): no allocation, no locale, no stdio,
// so that a signal handler may use it.
class FdWriter {
  public:
    explicit FdWriter(int fd) : fd_(fd) {}
    ~FdWriter() { flush(); }

    void put(const char* s, size_t n) {
        while (n > 0) {
            if (used_ == sizeof(buf_)) flush();
            size_t k = n < sizeof(buf_) - used_ ? n : sizeof(buf_) - used_;
            std::memcpy(buf_ + used_, s, k);
            used_ += k, s += k, n -= k;
        }
    }
    void put(std::string_view s) { put(s.data(), s.size()); }
    void put_u64(uint64_t v) {
        char digits[20];
        int n = 0;
        do {
            digits[n++] = char('0' + v % 10);
            v /= 10;
        } while (v != 0);
        char out[20];
        for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
        put(out, size_t(n));
    }
    void put_i64(int64_t v) {
        if (v < 0) {
            put("-");
            put_u64(uint64_t(-(v + 1)) + 1);
        } else {
            put_u64(uint64_t(v));
        }
    }
    // Microsecond resolution is finer than anything a hang or a slow rank needs.
    void put_seconds(double s) {
        if (!(s >= 0)) s = 0;
        const uint64_t us = uint64_t(s * 1e6 + 0.5);
        put_u64(us / 1000000);
        char frac[7] = {'.'};
        uint64_t f = us % 1000000;
        for (int i = 6; i >= 1; --i, f /= 10) frac[i] = char('0' + f % 10);
        put(frac, 7);
    }
    bool flush() {
        size_t done = 0;
        while (done < used_) {
            ssize_t k = ::write(fd_, buf_ + done, used_ - done);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                ok_ = false;
                break;
            }
            done += size_t(k);
        }
        used_ = 0;
        return ok_;
    }

  private:
    int fd_;
    char buf_[4096];
    size_t used_ = 0;
    bool ok_ = true;
};

// The dump directory itself, not its parents: they are the run directory, which a process that
// ends before the trainer made it (bad input, then mpirun's SIGTERM to the other ranks) must
// not create. No allocation: this runs in a signal handler.
bool make_dir(const std::string& dir) {
    return ::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST;
}

std::string file_in(const std::string& dir, int rank, const char* suffix) {
    if (dir.empty()) return {};
    return dir + "/rank_" + std::to_string(rank) + ".json" + suffix;
}

}  // namespace

std::string_view flight_reason_name(FlightReason reason) {
    return reason == FlightReason::timeout ? "timeout" : "signal";
}

FlightRecorder::FlightRecorder(int world_rank, std::string dir)
    : rank_(world_rank),
      epoch_(Clock::now()),
      dir_(std::move(dir)),
      path_(file_in(dir_, rank_, "")),
      temp_path_(file_in(dir_, rank_, ".tmp")) {}

void FlightRecorder::name_group(int index, std::string_view name) {
    if (index < 0 || index >= kMaxGroups) return;
    auto& dst = names_[index];
    const size_t n = std::min(name.size(), dst.size() - 1);
    std::memcpy(dst.data(), name.data(), n);
    dst[n] = '\0';
}

uint64_t FlightRecorder::begin(const FlightOp& op, Clock::time_point start) {
    // Only this thread writes; a reader (a signal handler) trusts entries below the published
    // count, and at worst sees the oldest one being replaced, which a dump can live with.
    const uint64_t id = count_.load(std::memory_order_relaxed);
    Slot& s = ring_[id % kFlightEntries];
    s.op = op;
    s.start_s = since_start(start);
    s.end_s.store(-1.0, std::memory_order_relaxed);
    count_.store(id + 1, std::memory_order_release);
    return id;
}

void FlightRecorder::end(uint64_t id, Clock::time_point end) {
    if (count_.load(std::memory_order_relaxed) - id > uint64_t(kFlightEntries)) return;
    ring_[id % kFlightEntries].end_s.store(since_start(end), std::memory_order_release);
}

void FlightRecorder::block(const FlightOp& op, Clock::time_point since) {
    is_blocked_.store(false, std::memory_order_relaxed);
    blocked_ = op;
    blocked_since_ = since;
    is_blocked_.store(true, std::memory_order_release);
}

void FlightRecorder::unblock(Clock::time_point now) {
    if (!is_blocked_.load(std::memory_order_relaxed)) return;
    blocked_s_ += std::chrono::duration<double>(now - blocked_since_).count();
    is_blocked_.store(false, std::memory_order_release);
}

std::array<FlightEntry, kFlightEntries> FlightRecorder::entries(int* n) const {
    std::array<FlightEntry, kFlightEntries> out{};
    const uint64_t count = count_.load(std::memory_order_acquire);
    const uint64_t first = count > uint64_t(kFlightEntries) ? count - kFlightEntries : 0;
    *n = int(count - first);
    for (uint64_t id = first; id < count; ++id) {
        const Slot& s = ring_[id % kFlightEntries];
        out[id - first] = {s.op, s.start_s, s.end_s.load(std::memory_order_acquire)};
    }
    return out;
}

bool FlightRecorder::write_json(int fd, FlightReason reason, const FlightOp* blocked) const {
    FdWriter w(fd);
    auto group = [&](int index) {
        w.put("\"");
        if (index >= 0 && index < kMaxGroups && names_[index][0] != '\0') {
            w.put(names_[index].data());
        } else {
            w.put("?");
        }
        w.put("\"");
    };
    w.put("{\"rank\": ");
    w.put_i64(rank_);
    w.put(", \"reason\": \"");
    w.put(flight_reason_name(reason));
    w.put("\", \"blocked\": ");
    if (blocked == nullptr) {
        w.put("null");
    } else {
        w.put("{\"op\": \"");
        w.put(op_name(blocked->op));
        w.put("\", \"group\": ");
        group(blocked->group);
        w.put(", \"seq\": ");
        w.put_u64(blocked->seq);
        w.put(", \"peer\": ");
        w.put_i64(blocked->peer);
        w.put(", \"bytes\": ");
        w.put_u64(blocked->bytes);
        w.put("}");
    }
    w.put(",\n \"entries\": [");
    const uint64_t count = count_.load(std::memory_order_acquire);
    const uint64_t first = count > uint64_t(kFlightEntries) ? count - kFlightEntries : 0;
    for (uint64_t id = first; id < count; ++id) {
        const Slot& s = ring_[id % kFlightEntries];
        w.put(id == first ? "\n  {\"op\": \"" : ",\n  {\"op\": \"");
        w.put(op_name(s.op.op));
        w.put("\", \"group\": ");
        group(s.op.group);
        w.put(", \"seq\": ");
        w.put_u64(s.op.seq);
        w.put(", \"bytes\": ");
        w.put_u64(s.op.bytes);
        w.put(", \"peer\": ");
        w.put_i64(s.op.peer);
        w.put(", \"start_s\": ");
        w.put_seconds(s.start_s);
        w.put(", \"end_s\": ");
        const double end = s.end_s.load(std::memory_order_acquire);
        if (end < 0) {
            w.put("null");
        } else {
            w.put_seconds(end);
        }
        w.put("}");
    }
    w.put("\n]}\n");
    return w.flush();
}

bool FlightRecorder::dump(FlightReason reason, const FlightOp* blocked) {
    if (dir_.empty()) return false;
    if (reason == FlightReason::signal && timeout_dumped_.load(std::memory_order_acquire))
        return false;
    if (!make_dir(dir_)) return false;
    const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    bool ok = write_json(fd, reason, blocked);
    ok = ::close(fd) == 0 && ok;
    ok = ok && ::rename(temp_path_.c_str(), path_.c_str()) == 0;
    if (ok && reason == FlightReason::timeout)
        timeout_dumped_.store(true, std::memory_order_release);
    return ok;
}

bool FlightRecorder::dump_now(FlightReason reason) {
    const bool blocked = is_blocked_.load(std::memory_order_acquire);
    return dump(reason, blocked ? &blocked_ : nullptr);
}

}  // namespace weft::comm
