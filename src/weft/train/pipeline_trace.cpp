#include "weft/train/pipeline_trace.hpp"

#include <string>

#include "weft/ckpt/atomic.hpp"
#include "weft/comm/collectives.hpp"

namespace weft::train {

void write_pipeline_trace(comm::Mesh& mesh, const std::vector<pipeline::TraceRecord>& records,
                          const std::filesystem::path& path) {
    comm::Group& pp = mesh.group(comm::Axis::pp);
    // Every pipeline gathers its records on its first rank; only world rank 0's writes. The
    // tracks are named by world rank.
    constexpr int kTag = 32200;
    auto encode = [&] {
        nlohmann::json a = nlohmann::json::array();
        for (const pipeline::TraceRecord& r : records)
            a.push_back({mesh.world_rank(), r.name, r.category, r.start_us, r.dur_us});
        return a.dump();
    };
    if (pp.rank() != 0) {
        const std::string text = encode();
        int64_t n = int64_t(text.size());
        comm::send(pp, std::span<const int64_t>(&n, 1), 0, kTag);
        comm::send(pp, std::as_bytes(std::span<const char>(text)), 0, kTag);
        return;
    }
    std::vector<pipeline::TraceRecord> all;
    auto add = [&](const std::string& text) {
        for (const auto& e : nlohmann::json::parse(text))
            all.push_back({e[0].get<int>(), e[1].get<std::string>(), e[2].get<std::string>(),
                           e[3].get<double>(), e[4].get<double>()});
    };
    add(encode());
    for (int r = 1; r < pp.size(); ++r) {
        int64_t n = 0;
        comm::recv(pp, std::span<int64_t>(&n, 1), r, kTag);
        std::string text(size_t(n), '\0');
        comm::recv(pp, std::as_writable_bytes(std::span<char>(text)), r, kTag);
        add(text);
    }
    if (mesh.world_rank() != 0) return;
    ckpt::write_file_atomic(path, pipeline::chrome_trace(all).dump(1));
}

}  // namespace weft::train
