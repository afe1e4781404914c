#include "weft/supervise/flight.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <tuple>

namespace weft::supervise {

namespace fs = std::filesystem;

namespace {

FlightOp parse_op(const nlohmann::json& j) {
    FlightOp op;
    op.op = j.at("op").get<std::string>();
    op.group = j.at("group").get<std::string>();
    op.seq = j.at("seq").get<int64_t>();
    op.bytes = j.value("bytes", int64_t(0));
    op.peer = j.value("peer", -1);
    return op;
}

std::string describe(const FlightOp& op) {
    if (op.peer >= 0) return fmt::format("{} with rank {} on {}", op.op, op.peer, op.group);
    return fmt::format("{} #{} on {}", op.op, op.seq, op.group);
}

}  // namespace

std::optional<FlightDump> parse_flight_dump(std::string_view text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    try {
        FlightDump d;
        d.rank = j.at("rank").get<int>();
        d.reason = j.value("reason", "");
        if (j.contains("blocked") && !j["blocked"].is_null()) d.blocked = parse_op(j["blocked"]);
        for (const auto& e : j.value("entries", nlohmann::json::array()))
            d.entries.push_back(parse_op(e));
        return d;
    } catch (const nlohmann::json::exception&) {
        return std::nullopt;
    }
}

std::vector<FlightDump> read_flight_dumps(const fs::path& dir) {
    std::vector<FlightDump> dumps;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("rank_", 0) != 0 || entry.path().extension() != ".json") continue;
        std::ifstream in(entry.path());
        std::stringstream text;
        text << in.rdbuf();
        if (auto d = parse_flight_dump(text.str())) dumps.push_back(std::move(*d));
    }
    std::sort(dumps.begin(), dumps.end(),
              [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
    return dumps;
}

FlightFinding analyse_flight(const std::vector<FlightDump>& dumps, int world_size) {
    FlightFinding f;
    f.json = nlohmann::json::object();
    std::vector<int> dumped;
    for (const auto& d : dumps) dumped.push_back(d.rank);
    std::vector<int> silent;
    for (int r = 0; r < world_size; ++r)
        if (std::find(dumped.begin(), dumped.end(), r) == dumped.end()) silent.push_back(r);
    f.json["dumped_ranks"] = dumped;
    f.json["ranks_without_dump"] = silent;

    // The collective the most ranks wait in is what the job was stuck on.
    using Key = std::tuple<std::string, std::string, int64_t>;
    std::map<Key, std::vector<int>> waiting;
    for (const auto& d : dumps)
        if (d.blocked && d.blocked->peer < 0)
            waiting[{d.blocked->group, d.blocked->op, d.blocked->seq}].push_back(d.rank);
    std::vector<std::string> parts;
    if (!waiting.empty()) {
        auto top = std::max_element(
            waiting.begin(), waiting.end(),
            [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
        const auto& [group, op, seq] = top->first;
        const std::vector<int>& waiters = top->second;
        for (const auto& d : dumps) {
            if (d.blocked) continue;  // blocked elsewhere: waiting too, not the cause
            int64_t last = -1;
            for (const auto& e : d.entries)
                if (e.group == group && e.peer < 0) last = std::max(last, e.seq);
            if (last < seq) {
                f.late.push_back(d.rank);
                f.json["late"].push_back({{"rank", d.rank}, {"last_seq", last}});
            }
        }
        const std::string what = fmt::format("{} #{} on {}", op, seq, group);
        f.json["collective"] = {{"op", op}, {"group", group}, {"seq", seq}};
        f.json["waiting"] = waiters;
        if (!f.late.empty())
            parts.push_back(fmt::format("{} never reached {}", ranks_text(f.late), what));
        parts.push_back(fmt::format("{} waited in {}", ranks_text(waiters), what));
    }
    for (const auto& d : dumps) {
        if (!d.blocked || d.blocked->peer < 0) continue;
        parts.push_back(fmt::format("rank {} waited in {}", d.rank, describe(*d.blocked)));
    }
    if (!parts.empty() && !silent.empty())
        parts.push_back(fmt::format("{} left no flight dump", ranks_text(silent)));
    f.text = fmt::format("{}", fmt::join(parts, "; "));
    f.json["text"] = f.text;
    return f;
}

std::string ranks_text(const std::vector<int>& ranks) {
    return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace weft::supervise
