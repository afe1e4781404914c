#pragma once
// Watching a job through the heartbeats its ranks write (RUN/heartbeat/rank_<r>.json, see
// weft/train/heartbeat.hpp): the last beat of each rank, when it last made progress, which ranks
// have stalled and which have died.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::supervise {

struct RankBeat {
    int rank = -1, world_size = 0, attempt = 0;
    int64_t step = 0;  // finished optimizer steps
    std::string phase, host, detail;
    double time = 0;  // unix seconds of the beat
    long pid = 0;
};

// One heartbeat file's text; nullopt if it is not a heartbeat.
std::optional<RankBeat> parse_heartbeat(std::string_view text);

class HeartbeatWatch {
  public:
    // `timeout`: seconds without progress (a new step or phase) after which a rank counts as
    // stalled; before a rank's first beat, counted from `start` (the launch).
    HeartbeatWatch(std::filesystem::path dir, double timeout, double start);

    // Reads the files that changed; `now` is the supervisor's clock (seconds).
    void poll(double now);
    // Ranks without progress for longer than the timeout, not counting finished ones; every rank
    // of the job (or rank -1 when none has beaten yet) once the launch itself is that old.
    std::vector<int> stalled(double now) const;
    // Ranks on this host whose process has ended while they had not finished.
    std::vector<int> dead() const;
    // Ranks that reported a non-finite loss.
    std::vector<int> non_finite() const;
    // Seconds since `rank` last made progress (since the launch if it never beat).
    double idle(int rank, double now) const;

    const std::map<int, RankBeat>& beats() const { return beats_; }
    int world_size() const { return world_size_; }

  private:
    struct Seen {
        std::filesystem::file_time_type mtime;
        double progress = 0;  // supervisor clock of the last new (step, phase)
    };
    std::filesystem::path dir_;
    double timeout_, start_;
    std::string host_;
    int world_size_ = 0;
    std::map<int, RankBeat> beats_;
    std::map<int, Seen> seen_;
};

// Whether process `pid` on this host has ended (or is a zombie its parent has not reaped yet).
bool process_ended(long pid);

}  // namespace weft::supervise
