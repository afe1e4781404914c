#include "weft/train/pipeline_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "weft/ckpt/atomic.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/parallel/pipeline/simulator.hpp"

namespace weft::train {

std::string BubbleReport::describe() const {
    return fmt::format(
        "pipeline bubble of the traced step: measured {:.3f}, simulated with its measured costs "
        "{:.3f}, ideal {:.3f} (step {:.3f} s)",
        measured, simulated, ideal, makespan_s);
}

BubbleReport measure_bubble(const pipeline::Schedule& s,
                            const std::vector<pipeline::TraceRecord>& records) {
    BubbleReport r;
    std::vector<double> end(size_t(s.pp), 0.0);
    double compute = 0;
    // Mean forward and backward time per chunk; the name is "forward m3 c5". A split
    // backward's B and W add up to its backward (per micro-batch), and give W's share.
    std::vector<double> fsum(size_t(s.chunks()), 0), bsum(size_t(s.chunks()), 0);
    std::vector<int> fn(size_t(s.chunks()), 0), bn(size_t(s.chunks()), 0);
    double wsum = 0;
    for (const pipeline::TraceRecord& t : records) {
        end[size_t(t.rank)] = std::max(end[size_t(t.rank)], t.start_us + t.dur_us);
        const bool f = t.category == "forward", w = t.category == "backward_weight";
        const bool b = t.category == "backward" || t.category == "backward_input" || w;
        if (!f && !b) continue;
        compute += t.dur_us;
        if (w) wsum += t.dur_us;
        const int c = std::stoi(t.name.substr(t.name.rfind(" c") + 2));
        (f ? fsum : bsum)[size_t(c)] += t.dur_us;
        if (!w) ++(f ? fn : bn)[size_t(c)];
    }
    const double makespan = *std::max_element(end.begin(), end.end());
    r.makespan_s = makespan * 1e-6;
    r.measured = makespan > 0 ? 1 - compute / (s.pp * makespan) : 0;
    pipeline::Costs costs;
    costs.send = costs.latency = 0;
    double bwd = 0;
    for (double x : bsum) bwd += x;
    if (s.split_backward() && bwd > 0) costs.weight_share = wsum / bwd;
    for (int c = 0; c < s.chunks(); ++c) {
        costs.chunk_forward.push_back(fn[size_t(c)] ? fsum[size_t(c)] / fn[size_t(c)] : 0);
        costs.chunk_backward.push_back(bn[size_t(c)] ? bsum[size_t(c)] / bn[size_t(c)] : 0);
    }
    r.simulated = pipeline::simulate(s, costs).bubble;
    r.ideal = pipeline::ideal_bubble(s.kind, s.pp, s.vpp, s.micro_batches);
    return r;
}

BubbleReport write_pipeline_trace(comm::Mesh& mesh, const pipeline::Schedule& schedule,
                                  const std::vector<pipeline::TraceRecord>& records,
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
        return {};
    }
    std::vector<pipeline::TraceRecord> all, by_stage;
    auto add = [&](const std::string& text, int stage) {
        for (const auto& e : nlohmann::json::parse(text)) {
            all.push_back({e[0].get<int>(), e[1].get<std::string>(), e[2].get<std::string>(),
                           e[3].get<double>(), e[4].get<double>()});
            by_stage.push_back(all.back());
            by_stage.back().rank = stage;
        }
    };
    add(encode(), 0);
    for (int r = 1; r < pp.size(); ++r) {
        int64_t n = 0;
        comm::recv(pp, std::span<int64_t>(&n, 1), r, kTag);
        std::string text(size_t(n), '\0');
        comm::recv(pp, std::as_writable_bytes(std::span<char>(text)), r, kTag);
        add(text, r);
    }
    if (mesh.world_rank() != 0) return {};
    ckpt::write_file_atomic(path, pipeline::chrome_trace(all).dump(1));
    return measure_bubble(schedule, by_stage);
}

}  // namespace weft::train
