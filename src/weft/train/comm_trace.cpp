#include "weft/train/comm_trace.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/ckpt/atomic.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::train {

namespace {

// "cp send 16.0 KiB to rank 1", "dp all_reduce 25.0 MiB".
std::string describe(const comm::FlightRecorder& f, const comm::FlightOp& op) {
    const double b = double(op.bytes);
    const std::string size = b >= (1 << 20)   ? fmt::format("{:.1f} MiB", b / (1 << 20))
                             : b >= (1 << 10) ? fmt::format("{:.1f} KiB", b / (1 << 10))
                                              : fmt::format("{} B", op.bytes);
    std::string name = fmt::format("{} {} {}", f.group_name(op.group), comm::op_name(op.op), size);
    if (op.op == comm::Op::send) name += fmt::format(" to rank {}", op.peer);
    if (op.op == comm::Op::recv) name += fmt::format(" from rank {}", op.peer);
    return name;
}

}  // namespace

int write_comm_trace(comm::Mesh& mesh, double from_s, double to_s,
                     const std::filesystem::path& path) {
    const comm::FlightRecorder& f = mesh.flight();
    int n = 0;
    const auto entries = f.entries(&n);
    const int me = mesh.world_rank();
    std::vector<pipeline::TraceRecord> mine{
        {me, fmt::format("step (rank {})", me), "step", 0.0, (to_s - from_s) * 1e6}};
    int kept = 0;
    bool dropped = n == comm::kFlightEntries;  // the ring is full: older ones may be gone
    for (int i = 0; i < n; ++i) {
        const comm::FlightEntry& e = entries[size_t(i)];
        if (e.end_s < 0 || e.start_s < from_s) {
            if (e.start_s < from_s) dropped = false;  // the window's start is still held
            continue;
        }
        if (e.start_s > to_s) continue;
        mine.push_back({me, describe(f, e.op), std::string(comm::op_name(e.op.op)),
                        (e.start_s - from_s) * 1e6, (e.end_s - e.start_s) * 1e6});
        ++kept;
    }
    if (dropped)
        mine.push_back({me, "older operations of the step dropped by the flight recorder",
                        "dropped", 0.0, 0.0});

    // Gather every rank's records on world rank 0, as the pipeline timeline does.
    comm::Group& world = mesh.group(comm::Axis::world);
    constexpr int kTag = 32201;
    nlohmann::json a = nlohmann::json::array();
    for (const pipeline::TraceRecord& r : mine)
        a.push_back({r.rank, r.name, r.category, r.start_us, r.dur_us});
    const std::string text = a.dump();
    if (world.rank() != 0) {
        const int64_t len = int64_t(text.size());
        comm::send(world, std::span<const int64_t>(&len, 1), 0, kTag);
        comm::send(world, std::as_bytes(std::span<const char>(text)), 0, kTag);
        return kept;
    }
    std::vector<pipeline::TraceRecord> all;
    auto add = [&](const std::string& t) {
        for (const auto& e : nlohmann::json::parse(t))
            all.push_back({e[0].get<int>(), e[1].get<std::string>(), e[2].get<std::string>(),
                           e[3].get<double>(), e[4].get<double>()});
    };
    add(text);
    for (int r = 1; r < world.size(); ++r) {
        int64_t len = 0;
        comm::recv(world, std::span<int64_t>(&len, 1), r, kTag);
        std::string t(size_t(len), '\0');
        comm::recv(world, std::as_writable_bytes(std::span<char>(t)), r, kTag);
        add(t);
    }
    ckpt::write_file_atomic(path, pipeline::chrome_trace(all).dump(1));
    return kept;
}

}  // namespace weft::train
