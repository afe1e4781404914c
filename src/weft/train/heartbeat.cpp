#include "weft/train/heartbeat.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

#include "weft/train/process.hpp"

namespace weft::train {

namespace fs = std::filesystem;

const char* phase_name(Phase phase) {
    switch (phase) {
        case Phase::init:
            return "init";
        case Phase::step:
            return "step";
        case Phase::checkpoint:
            return "checkpoint";
        case Phase::eval:
            return "eval";
        case Phase::done:
            return "done";
        case Phase::nonfinite:
            return "nonfinite";
    }
    return "?";
}

Heartbeat::Heartbeat(fs::path dir, int world_rank, int world_size)
    : rank_(world_rank), world_size_(world_size), attempt_(attempt_from_env()), pid_(getpid()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    path_ = (dir / fmt::format("rank_{}.json", world_rank)).string();
    tmp_ = (dir / fmt::format(".tmp-rank_{}.json", world_rank)).string();
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    host_ = host;
}

void Heartbeat::beat(Phase phase, int64_t step, std::string_view detail) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // nlohmann::json escapes the host name and the detail (a path in it may hold anything).
    const nlohmann::json beat = {{"rank", rank_},
                                 {"world_size", world_size_},
                                 {"step", step},
                                 {"phase", phase_name(phase)},
                                 {"time", std::round(now * 1000) / 1000},
                                 {"pid", pid_},
                                 {"host", host_},
                                 {"attempt", attempt_},
                                 {"detail", detail}};
    const std::string line = beat.dump() + "\n";
    const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const bool written = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
    ::close(fd);
    if (!written) return;
    // Renaming over an existing file makes ext4 flush the new one first (its replace-via-rename
    // safeguard): 0.97 ms a beat, against 0.07 ms after an unlink. A reader that looks in
    // between finds no file and keeps the beat it had.
    ::unlink(path_.c_str());
    std::rename(tmp_.c_str(), path_.c_str());
}

}  // namespace weft::train
