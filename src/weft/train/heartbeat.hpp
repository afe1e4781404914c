#pragma once
// Per-rank heartbeats for a supervisor (`weft run`, docs/supervisor.md). Each rank replaces
// RUN/heartbeat/rank_<world rank>.json at every step and phase change with one line:
//   {"rank": r, "world_size": n, "step": s, "phase": "step", "time": <unix s>, "pid": p,
//    "host": "...", "attempt": k, "detail": "..."}
// `step` counts finished optimizer steps. The file is written under a temporary name and renamed,
// so a reader never sees half of it (but may briefly see none); no fsync, as the reader is a live
// process, not a restart. About 0.07 ms a beat on ext4.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace weft::train {

enum class Phase { init, step, checkpoint, eval, done, nonfinite };
const char* phase_name(Phase phase);

class Heartbeat {
  public:
    // Creates `dir` if needed. Heartbeats are advisory: a failed write is skipped, never an error
    // (a supervisor that stops seeing them treats the rank as hung).
    Heartbeat(std::filesystem::path dir, int world_rank, int world_size);
    void beat(Phase phase, int64_t step, std::string_view detail = {});

  private:
    std::string path_, tmp_, host_;
    int rank_, world_size_, attempt_;
    long pid_;
};

}  // namespace weft::train
