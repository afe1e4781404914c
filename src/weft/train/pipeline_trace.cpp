#include "weft/train/pipeline_trace.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <string>

#include "weft/ckpt/atomic.hpp"
#include "weft/comm/collectives.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/train/process.hpp"

namespace weft::train {

std::string BubbleReport::describe() const {
    std::string costs = "measured costs";
    if (!rank_core.empty())
        costs = fmt::format(
            "CPU times on {:g} shared cores, each stage on the one it is bound to "
            "({})",
            cores, fmt::join(rank_core, " "));
    else if (cores > 0)
        costs = fmt::format("CPU times on {:g} shared cores", cores);
    std::string text = fmt::format(
        "pipeline bubble of the traced step: measured {:.3f}, simulated with its {} {:.3f}, ideal "
        "{:.3f} (step {:.3f} s); idle share per stage measured {:.3f}, simulated {:.3f}",
        measured, costs, simulated, ideal, makespan_s, fmt::join(idle_measured, " "),
        fmt::join(idle_simulated, " "));
    if (peak_rss_bytes.empty()) return text;
    auto mib = [](const std::vector<int64_t>& v) {
        std::vector<double> out;
        for (int64_t b : v) out.push_back(double(b) / (1 << 20));
        return out;
    };
    return text + fmt::format("; peak resident memory per stage {:.1f} MiB, activations {:.1f} MiB",
                              fmt::join(mib(peak_rss_bytes), " "),
                              fmt::join(mib(activation_bytes), " "));
}

CoreSharing shared_cores(const std::vector<StagePlace>& stages) {
    const StagePlace& first = stages.front();
    for (const StagePlace& p : stages)
        if (p.node != first.node || p.threads != 1) return {};
    if (first.node_ranks <= first.node_cores) return {};
    const bool bound =
        std::all_of(stages.begin(), stages.end(), [](const StagePlace& p) { return p.core >= 0; });
    if (bound && first.node_ranks == int(stages.size())) {
        CoreSharing c;
        for (const StagePlace& p : stages) c.rank_core.push_back(p.core);
        return c;
    }
    return {double(first.node_cores) * double(stages.size()) / first.node_ranks, {}};
}

BubbleReport measure_bubble(const pipeline::Schedule& s,
                            const std::vector<pipeline::TraceRecord>& records,
                            const CoreSharing& sharing) {
    BubbleReport r;
    r.cores = sharing.cores;
    r.rank_core = sharing.rank_core;
    if (!r.rank_core.empty()) {
        std::vector<int> cores = r.rank_core;
        std::sort(cores.begin(), cores.end());
        r.cores = double(std::unique(cores.begin(), cores.end()) - cores.begin());
    }
    std::vector<double> end(size_t(s.pp), 0.0), compute(size_t(s.pp), 0.0);
    for (const pipeline::TraceRecord& t : records) {
        end[size_t(t.rank)] = std::max(end[size_t(t.rank)], t.start_us + t.dur_us);
        if (t.category == "forward" || t.category.starts_with("backward"))
            compute[size_t(t.rank)] += t.dur_us;
    }
    const double makespan = *std::max_element(end.begin(), end.end());
    const double total = std::accumulate(compute.begin(), compute.end(), 0.0);
    r.makespan_s = makespan * 1e-6;
    r.measured = makespan > 0 ? 1 - total / (s.pp * makespan) : 0;
    // The mean, so that the simulated step does the measured step's compute. On shared cores an
    // action's wall time depends on how many ranks computed beside it, which the simulation
    // works out from each action's own work.
    pipeline::Costs costs = pipeline::measured_costs(s.chunks(), records, false, sharing.shared());
    costs.cores = sharing.cores;
    costs.rank_core = sharing.rank_core;
    const pipeline::SimResult sim = pipeline::simulate(s, costs);
    r.simulated = sim.bubble;
    for (int k = 0; k < s.pp; ++k) {
        r.idle_measured.push_back(makespan > 0 ? 1 - compute[size_t(k)] / makespan : 0);
        r.idle_simulated.push_back(sim.makespan > 0 ? sim.idle[size_t(k)] / sim.makespan : 0);
    }
    r.ideal = pipeline::ideal_bubble(s.kind, s.pp, s.vpp, s.micro_batches);
    return r;
}

std::pair<nlohmann::json, std::string> stage_costs_report(const Layout& l, int micro_batches,
                                                          const pipeline::Costs& c, bool cpu) {
    const int m = micro_batches;
    const double unit =
        pipeline::simulate(pipeline::make_schedule(l.pp_schedule, l.pp, l.vpp, m), c).bubble;
    const double fit =
        pipeline::simulate(pipeline::make_schedule(l.pp_schedule, l.pp, l.vpp, m, c), c).bubble;
    auto ms = [](std::vector<double> v) {
        for (double& x : v) x = std::round(x / 10) / 100;
        return v;
    };
    const std::vector<double> f = ms(c.chunk_forward), b = ms(c.chunk_backward),
                              w = ms(c.chunk_weight);
    std::string table;
    for (size_t i = 0; i < f.size(); ++i)
        table += fmt::format("{}{:g} / {:g} / {:g}", i ? ", " : "", f[i], b[i], w[i]);
    nlohmann::json line = {{"event", "pipeline_costs"},
                           {"forward_ms", f},
                           {"backward_ms", b},
                           {"weight_ms", w},
                           {"cpu_times", cpu},
                           {"bubble_unit_costs", unit},
                           {"bubble_measured_costs", fit}};
    return {line, fmt::format("{} made for the first step's costs per chunk (F / B+W / W ms{}: "
                              "{}): simulated bubble {:.3f}, against {:.3f} for F = B = W",
                              format_schedule_kind(l.pp_schedule), cpu ? " of CPU time" : "", table,
                              fit, unit)};
}

BubbleReport write_pipeline_trace(comm::Mesh& mesh, const pipeline::Schedule& schedule,
                                  const std::vector<pipeline::TraceRecord>& records,
                                  const StageMemory& memory, const std::filesystem::path& path) {
    comm::Group& pp = mesh.group(comm::Axis::pp);
    const NodeShare node = node_share(mesh);
    const std::array<int64_t, 6> mine = {node.node,  node.ranks,
                                         node.cores, int64_t(omp_get_max_threads()),
                                         node.core,  mesh.world_rank()};
    std::vector<int64_t> places(mine.size() * size_t(pp.size()));
    comm::all_gather(pp, std::span<const int64_t>(mine), std::span<int64_t>(places));
    // Every pipeline gathers its records on its first rank; only world rank 0's writes. The
    // tracks are named by world rank.
    constexpr int kTag = 32200;
    auto encode = [&] {
        nlohmann::json a = nlohmann::json::array();
        for (const pipeline::TraceRecord& r : records)
            a.push_back({mesh.world_rank(), r.name, r.category, r.start_us, r.dur_us, r.cpu_us});
        return a.dump();
    };
    // Each stage sends its records' length and its memory, then the records.
    if (pp.rank() != 0) {
        const std::string text = encode();
        const int64_t head[3] = {int64_t(text.size()), memory.peak_rss_bytes,
                                 memory.activation_bytes};
        comm::send(pp, std::span<const int64_t>(head, 3), 0, kTag);
        comm::send(pp, std::as_bytes(std::span<const char>(text)), 0, kTag);
        return {};
    }
    std::vector<int64_t> rss = {memory.peak_rss_bytes}, act = {memory.activation_bytes};
    std::vector<pipeline::TraceRecord> all, by_stage;
    auto add = [&](const std::string& text, int stage) {
        for (const auto& e : nlohmann::json::parse(text)) {
            all.push_back({e[0].get<int>(), e[1].get<std::string>(), e[2].get<std::string>(),
                           e[3].get<double>(), e[4].get<double>(), e[5].get<double>()});
            by_stage.push_back(all.back());
            by_stage.back().rank = stage;
        }
    };
    add(encode(), 0);
    for (int r = 1; r < pp.size(); ++r) {
        int64_t head[3] = {0, 0, 0};
        comm::recv(pp, std::span<int64_t>(head, 3), r, kTag);
        std::string text(size_t(head[0]), '\0');
        comm::recv(pp, std::as_writable_bytes(std::span<char>(text)), r, kTag);
        add(text, r);
        rss.push_back(head[1]);
        act.push_back(head[2]);
    }
    if (mesh.world_rank() != 0) return {};
    std::vector<StagePlace> stages;
    // The binding goes into the trace (by world rank, as the tracks are named), so that a
    // timeline can be read, and simulated again (weft pipeline --rank-cores), with it.
    nlohmann::json rank_cores = nlohmann::json::object();
    std::vector<int> stage_cores;
    for (size_t k = 0; k < places.size(); k += mine.size()) {
        stages.push_back({places[k], int(places[k + 1]), int(places[k + 2]), int(places[k + 3]),
                          int(places[k + 4])});
        rank_cores[std::to_string(places[k + 5])] = places[k + 4];
        stage_cores.push_back(int(places[k + 4]));
    }
    nlohmann::json trace = pipeline::chrome_trace(all);
    trace["otherData"] = {{"rank_cores", rank_cores}};
    ckpt::write_file_atomic(path, trace.dump(1));
    BubbleReport report = measure_bubble(schedule, by_stage, shared_cores(stages));
    report.stage_cores = std::move(stage_cores);
    report.peak_rss_bytes = std::move(rss);
    report.activation_bytes = std::move(act);
    return report;
}

}  // namespace weft::train
