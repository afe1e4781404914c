#include "weft/comm/stats.hpp"

#include <fmt/format.h>

namespace weft::comm {

std::string_view op_name(Op op) {
    switch (op) {
        case Op::all_reduce:
            return "all_reduce";
        case Op::reduce_scatter:
            return "reduce_scatter";
        case Op::all_gather:
            return "all_gather";
        case Op::all_to_all:
            return "all_to_all";
        case Op::broadcast:
            return "broadcast";
        case Op::send:
            return "send";
        case Op::recv:
            return "recv";
        case Op::barrier:
            return "barrier";
    }
    return "?";
}

OpStats& OpStats::operator+=(const OpStats& other) {
    calls += other.calls;
    bytes += other.bytes;
    bus_bytes += other.bus_bytes;
    seconds += other.seconds;
    wait_seconds += other.wait_seconds;
    return *this;
}

OpStats GroupStats::total() const {
    OpStats sum;
    for (const OpStats& op : ops) sum += op;
    return sum;
}

const GroupStats* CommStats::find(std::string_view name) const {
    for (const GroupStats& g : groups) {
        if (g.name == name) return &g;
    }
    return nullptr;
}

namespace {

nlohmann::json op_json(const OpStats& s) {
    return {{"calls", s.calls},
            {"bytes", s.bytes},
            {"bus_bytes", s.bus_bytes},
            {"seconds", s.seconds},
            {"wait_seconds", s.wait_seconds}};
}

std::string human_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, ++u;
    return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace

nlohmann::json CommStats::to_json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const GroupStats& g : groups) {
        nlohmann::json j = {{"size", g.size}, {"total", op_json(g.total())}};
        for (int i = 0; i < kOpCount; ++i) {
            if (g.ops[i].calls > 0) j[std::string(op_name(Op(i)))] = op_json(g.ops[i]);
        }
        out[g.name] = std::move(j);
    }
    return out;
}

std::string CommStats::table() const {
    std::string out = fmt::format("{:<8} {:>4}  {:<15} {:>8} {:>12} {:>12} {:>9} {:>9}\n", "group",
                                  "size", "op", "calls", "bytes", "bus bytes", "time s", "wait s");
    for (const GroupStats& g : groups) {
        for (int i = 0; i < kOpCount; ++i) {
            const OpStats& s = g.ops[i];
            if (s.calls == 0) continue;
            out +=
                fmt::format("{:<8} {:>4}  {:<15} {:>8} {:>12} {:>12} {:>9.3f} {:>9.3f}\n", g.name,
                            g.size, op_name(Op(i)), s.calls, human_bytes(double(s.bytes)),
                            human_bytes(s.bus_bytes), s.seconds, s.wait_seconds);
        }
    }
    return out;
}

}  // namespace weft::comm
