#include "weft/supervise/heartbeats.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

namespace weft::supervise {

namespace fs = std::filesystem;

std::optional<RankBeat> parse_heartbeat(std::string_view text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    try {
        RankBeat b;
        b.rank = j.at("rank").get<int>();
        b.world_size = j.at("world_size").get<int>();
        b.step = j.at("step").get<int64_t>();
        b.phase = j.at("phase").get<std::string>();
        b.time = j.at("time").get<double>();
        b.pid = j.at("pid").get<long>();
        b.host = j.value("host", "");
        b.attempt = j.value("attempt", 0);
        b.detail = j.value("detail", "");
        if (b.rank < 0 || b.world_size <= b.rank) return std::nullopt;
        return b;
    } catch (const nlohmann::json::exception&) {
        return std::nullopt;
    }
}

bool process_ended(long pid) {
    if (pid <= 0) return false;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) return true;
    // A killed rank stays a zombie until its launcher reaps it; the state is the field after
    // the parenthesised command name.
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() &&
           (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

HeartbeatWatch::HeartbeatWatch(fs::path dir, double timeout, double start)
    : dir_(std::move(dir)), timeout_(timeout), start_(start) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    host_ = host;
}

void HeartbeatWatch::poll(double now) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("rank_", 0) != 0 || entry.path().extension() != ".json") continue;
        const auto mtime = entry.last_write_time(ec);
        if (ec) continue;
        std::ifstream in(entry.path());
        std::stringstream text;
        text << in.rdbuf();
        std::optional<RankBeat> b = parse_heartbeat(text.str());
        if (!b) continue;
        auto old = beats_.find(b->rank);
        Seen& seen = seen_[b->rank];
        if (old != beats_.end() && old->second.step == b->step && old->second.phase == b->phase &&
            old->second.pid == b->pid && mtime == seen.mtime)
            continue;
        const bool progress = old == beats_.end() || old->second.step != b->step ||
                              old->second.phase != b->phase || old->second.pid != b->pid;
        if (progress) seen.progress = now;
        seen.mtime = mtime;
        world_size_ = std::max(world_size_, b->world_size);
        beats_[b->rank] = *b;
    }
}

double HeartbeatWatch::idle(int rank, double now) const {
    auto it = seen_.find(rank);
    return now - (it == seen_.end() ? start_ : it->second.progress);
}

std::vector<int> HeartbeatWatch::stalled(double now) const {
    std::vector<int> out;
    if (world_size_ == 0) {
        if (now - start_ > timeout_) out.push_back(-1);
        return out;
    }
    for (int r = 0; r < world_size_; ++r) {
        auto b = beats_.find(r);
        if (b != beats_.end() && b->second.phase == "done") continue;
        if (idle(r, now) > timeout_) out.push_back(r);
    }
    return out;
}

std::vector<int> HeartbeatWatch::dead() const {
    std::vector<int> out;
    for (const auto& [r, b] : beats_) {
        if (b.phase == "done" || b.host != host_) continue;
        if (process_ended(b.pid)) out.push_back(r);
    }
    return out;
}

std::vector<int> HeartbeatWatch::non_finite() const {
    std::vector<int> out;
    for (const auto& [r, b] : beats_)
        if (b.phase == "nonfinite") out.push_back(r);
    return out;
}

}  // namespace weft::supervise
