#include "weft/supervise/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <fstream>

#include "weft/core/error.hpp"

namespace weft::supervise {

namespace fs = std::filesystem;

const char* cause_name(Cause cause) {
    switch (cause) {
        case Cause::exit:
            return "exit";
        case Cause::hang:
            return "hang";
        case Cause::non_finite:
            return "nonfinite";
    }
    return "?";
}

nlohmann::json fault_json(const Fault& f) {
    nlohmann::json ranks = nlohmann::json::object();
    for (const auto& [r, b] : f.beats)
        ranks[std::to_string(r)] = {{"step", b.step},    {"phase", b.phase}, {"time", b.time},
                                    {"pid", b.pid},      {"host", b.host},   {"attempt", b.attempt},
                                    {"detail", b.detail}};
    nlohmann::json j = {{"attempt", f.attempt},
                        {"cause", cause_name(f.cause)},
                        {"what", f.what},
                        {"ranks", f.ranks},
                        {"last_beats", ranks},
                        {"detected_at", f.detected_unix},
                        {"resume_from", f.resume_from}};
    if (f.latency_s >= 0) j["detection_latency_s"] = f.latency_s;
    if (f.status) {
        j["command_exit_code"] = f.status->code;
        j["command_signal"] = f.status->signal;
    } else {
        j["command_exit_code"] = nullptr;  // stopped by the supervisor
    }
    if (!f.watchdog.empty()) j["watchdog"] = f.watchdog;
    if (!f.flight.text.empty()) j["flight"] = f.flight.json;
    return j;
}

std::string fault_line(const Fault& f) {
    std::vector<std::string> steps;
    for (const auto& [r, b] : f.beats) steps.push_back(fmt::format("{}:{}", r, b.step));
    std::string line = fmt::format("weft run: attempt {}: {}", f.attempt, f.what);
    line += steps.empty() ? "; no rank wrote a heartbeat"
                          : fmt::format("; last step per rank {}", fmt::join(steps, " "));
    line += "; command " + (f.status ? f.status->describe() : std::string("stopped by weft run"));
    if (!f.flight.text.empty()) line += "; flight recorder: " + f.flight.text;
    return line;
}

fs::path write_fault_report(const fs::path& run_dir, const nlohmann::json& report, int attempt) {
    const fs::path dir = run_dir / "faults";
    fs::create_directories(dir);
    const fs::path path = dir / fmt::format("attempt_{}.json", attempt);
    const fs::path tmp = dir / fmt::format(".tmp-attempt_{}.json", attempt);
    {
        std::ofstream out(tmp);
        out << report.dump(2) << "\n";
        WEFT_CHECK(out.good(), "weft run: cannot write the fault report {}", tmp.string());
    }
    fs::rename(tmp, path);
    return path;
}

std::string find_watchdog_message(const std::string& text) {
    const size_t at = text.rfind("comm watchdog: ");
    if (at == std::string::npos) return "";
    const size_t end = text.find('\n', at);
    return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::string find_launch_failure(const std::string& text) {
    for (const char* words :
         {"unable to launch the specified application", "execvp error on file", "execve(): "}) {
        const size_t at = text.find(words);
        if (at == std::string::npos) continue;
        const size_t begin = text.rfind('\n', at) + 1;  // npos + 1: the start
        const size_t end = text.find('\n', at);
        return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    }
    return "";
}

std::vector<int> watchdog_missing_ranks(const std::string& message) {
    std::vector<int> ranks;
    const std::string key = "missing: rank ";
    size_t at = message.find(key);
    if (at == std::string::npos) return ranks;
    at += key.size();
    while (at < message.size() && std::isdigit(static_cast<unsigned char>(message[at]))) {
        size_t end = at;
        while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end])))
            ++end;
        ranks.push_back(std::stoi(message.substr(at, end - at)));
        at = end;
        if (message.compare(at, 2, ", ") != 0) break;
        at += 2;
    }
    return ranks;
}

}  // namespace weft::supervise
