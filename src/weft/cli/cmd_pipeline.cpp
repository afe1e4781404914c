#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <array>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/cli/commands.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/parallel/pipeline/svg.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::cli {

namespace {
struct PipelineArgs {
    int pp = 4, vpp = 1, micro_batches = 8;
    std::string schedule = "1f1b";
    double forward = 1, backward = 2, send = 0, latency = 0, weight_share = 0.5, cores = 0;
    std::string stage_costs;      // "F/B/W,F/B/W,..." one a stage
    std::vector<int> rank_cores;  // the core each rank is bound to
    std::filesystem::path svg, trace;
    bool json = false;
};

// The formula ideal_bubble computes, as the papers write it.
const char* bubble_formula(pipeline::ScheduleKind kind) {
    switch (kind) {
        case pipeline::ScheduleKind::interleaved:
            return "(p-1)/(v*m+p-1)";
        case pipeline::ScheduleKind::zb_h1:
            return "(p-1)/(3m+p-1) (Qi et al., F = B = W)";
        case pipeline::ScheduleKind::zb_v:
            return "0 (Qi et al., F = B = W, m >= 2p)";
        default:
            return "(p-1)/(m+p-1)";
    }
}

// "F/B/W,..." (one whole stage per rank: forward, B and W) as per-chunk costs, each rank's
// stage spread evenly over its vpp chunks as stage_costs() does.
pipeline::Costs parse_stage_costs(const std::string& text, int pp, int vpp, bool vee) {
    std::vector<std::array<double, 3>> stages;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t end = std::min(text.find(',', pos), text.size());
        const std::string entry = text.substr(pos, end - pos);
        std::array<double, 3> x{};
        const char* p = entry.data();
        const char* e = p + entry.size();
        bool ok = true;
        for (int i = 0; i < 3 && ok; ++i) {
            auto r = std::from_chars(p, e, x[size_t(i)]);
            ok = r.ec == std::errc() && x[size_t(i)] >= 0 && (i == 2 ? r.ptr == e : *r.ptr == '/');
            p = r.ptr + 1;
        }
        WEFT_CHECK(ok,
                   "--stage-costs '{}': '{}' is not a stage's costs; expected F/B/W, three "
                   "non-negative numbers (forward, input gradient, weight gradient), e.g. 2/1/1",
                   text, entry);
        stages.push_back(x);
        pos = end + 1;
    }
    WEFT_CHECK(int(stages.size()) == pp,
               "--stage-costs '{}' has {} stages; expected one F/B/W for each of the --pp {} "
               "stages",
               text, stages.size(), pp);
    pipeline::Costs c;
    for (int chunk = 0; chunk < pp * vpp; ++chunk) {
        const auto& x = stages[size_t(pipeline::chunk_owner(chunk, pp, vee))];
        c.chunk_forward.push_back(x[0] / vpp);
        c.chunk_backward.push_back((x[1] + x[2]) / vpp);
        c.chunk_weight.push_back(x[2] / vpp);
    }
    return c;
}

void write_file(const std::filesystem::path& path, const std::string& text, const char* flag) {
    std::ofstream f(path, std::ios::binary);
    WEFT_CHECK(f.good(), "{} {}: cannot open the file for writing", flag, path.string());
    f << text;
    WEFT_CHECK(f.good(), "{} {}: writing failed", flag, path.string());
}
}  // namespace

void add_pipeline_command(CLI::App& app) {
    auto a = std::make_shared<PipelineArgs>();
    CLI::App* c = app.add_subcommand(
        "pipeline",
        "Generate and simulate a pipeline schedule without a model: its bubble, makespan and "
        "activation memory, and optionally a picture (SVG) and a Chrome trace");
    c->add_option("--pp", a->pp, "Pipeline ranks (stages)")->capture_default_str();
    c->add_option("--micro-batches", a->micro_batches, "Micro-batches per step")
        ->capture_default_str();
    c->add_option("--pp-schedule", a->schedule,
                  "gpipe | 1f1b | interleaved | zb-h1 | zb-v (zero-bubble: backward split into "
                  "B and W)")
        ->capture_default_str();
    c->add_option("--vpp", a->vpp,
                  "Model chunks per rank (interleaved; zb-v is 2 in a V, set for you)")
        ->capture_default_str();
    c->add_option("--weight-share", a->weight_share,
                  "zb-h1 / zb-v: the share of a backward that is W, the weights' gradients")
        ->capture_default_str();
    c->add_option("--forward-cost", a->forward,
                  "Forward time of one whole stage; each of the vpp chunks takes 1/vpp of it")
        ->capture_default_str();
    c->add_option("--backward-cost", a->backward, "Backward time of one whole stage")
        ->capture_default_str();
    c->add_option("--stage-costs", a->stage_costs,
                  "Each stage's own costs, F/B/W per stage separated by commas (forward, input "
                  "gradient, weight gradient; e.g. measured ms: 214/216/202,443/73/67); the "
                  "zero-bubble schedules are generated for them; replaces --forward-cost, "
                  "--backward-cost and --weight-share");
    c->add_option("--send-cost", a->send, "Time a rank spends posting one send")
        ->capture_default_str();
    c->add_option("--latency", a->latency, "Time from a send to its arrival at the receiver")
        ->capture_default_str();
    c->add_option("--cores", a->cores,
                  "Processors the stages share (ranks oversubscribing a node): a stage computing "
                  "runs at min(1, cores / stages computing) of its speed; 0: one each")
        ->capture_default_str();
    c->add_option("--rank-cores", a->rank_cores,
                  "The core each stage is bound to, one a stage separated by commas (e.g. "
                  "0,1,0,1 for 4 stages bound by mpirun --bind-to core on 2 cores): stages share "
                  "only the core they are bound to; replaces --cores")
        ->delimiter(',');
    c->add_option("--svg", a->svg, "Write a picture of the schedule to this SVG file");
    c->add_option("--trace", a->trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) to this JSON file; one cost "
                  "unit is shown as one millisecond");
    c->add_flag("--json", a->json, "Print one JSON object instead of text");
    c->callback([a, c] {
        check_output_paths({{a->svg, "--svg", false}, {a->trace, "--trace", false}});
        WEFT_CHECK(a->cores >= 0,
                   "--cores {}: expected the number of processors the stages share, at least 0 "
                   "(0: one each)",
                   a->cores);
        if (!a->rank_cores.empty()) {
            WEFT_CHECK(int(a->rank_cores.size()) == a->pp,
                       "--rank-cores {}: {} cores; expected one for each of the --pp {} stages",
                       fmt::join(a->rank_cores, ","), a->rank_cores.size(), a->pp);
            for (int core : a->rank_cores)
                WEFT_CHECK(core >= 0,
                           "--rank-cores {}: core {} is not a core; expected numbers >= 0",
                           fmt::join(a->rank_cores, ","), core);
            WEFT_CHECK(a->cores == 0,
                       "--rank-cores binds each stage to its core; expected no --cores beside it");
        }
        const pipeline::ScheduleKind kind = pipeline::parse_schedule_kind(a->schedule);
        if (kind == pipeline::ScheduleKind::zb_v && a->vpp == 1) a->vpp = 2;
        pipeline::Costs costs = pipeline::stage_costs(a->vpp, a->forward, a->backward);
        costs.weight_share = a->weight_share;
        if (!a->stage_costs.empty()) {
            for (const char* flag : {"--forward-cost", "--backward-cost", "--weight-share"})
                WEFT_CHECK(c->get_option(flag)->count() == 0,
                           "--stage-costs gives every stage's costs; expected no {} beside it",
                           flag);
            WEFT_CHECK(a->pp >= 1 && a->vpp >= 1,
                       "pipeline parallel size and vpp must be at least 1, got pp={} vpp={}", a->pp,
                       a->vpp);
            costs = parse_stage_costs(a->stage_costs, a->pp, a->vpp, pipeline::places_in_vee(kind));
        }
        costs.send = a->send;
        costs.latency = a->latency;
        costs.cores = a->cores;
        costs.rank_core = a->rank_cores;
        const pipeline::Schedule s =
            pipeline::make_schedule(kind, a->pp, a->vpp, a->micro_batches, costs);
        pipeline::validate(s);
        const pipeline::SimResult r = pipeline::simulate(s, costs);
        // Each rank's idle time (waiting on messages, and after its last action) as a share of
        // the step: where the bubble sits.
        std::vector<double> idle_share;
        for (double x : r.idle) idle_share.push_back(r.makespan > 0 ? x / r.makespan : 0);
        const double theory = pipeline::ideal_bubble(kind, a->pp, a->vpp, a->micro_batches);

        if (!a->svg.empty()) write_file(a->svg, pipeline::schedule_svg(s, r), "--svg");
        if (!a->trace.empty()) write_file(a->trace, pipeline::chrome_trace(r).dump(1), "--trace");

        if (a->json) {
            const nlohmann::json j = {
                {"schedule", a->schedule},
                {"pp", a->pp},
                {"vpp", a->vpp},
                {"micro_batches", a->micro_batches},
                {"cores", a->cores},
                {"rank_cores", a->rank_cores},
                {"bubble", r.bubble},
                {"bubble_theory", theory},
                {"makespan", r.makespan},
                {"busy", r.busy},
                {"idle", r.idle},
                {"idle_share", idle_share},
                {"peak_in_flight", r.peak_in_flight},
            };
            fmt::print("{}\n", j.dump());
            return;
        }
        fmt::print("{} pp={} vpp={} micro-batches={}{}\n", a->schedule, a->pp, a->vpp,
                   a->micro_batches,
                   !a->rank_cores.empty()
                       ? fmt::format(" on cores {} (rank by rank)", fmt::join(a->rank_cores, ","))
                   : a->cores > 0 ? fmt::format(" on {:g} shared cores", a->cores)
                                  : "");
        fmt::print("bubble     {:.4f} simulated, {:.4f} theory {}\n", r.bubble, theory,
                   bubble_formula(kind));
        if (a->stage_costs.empty())
            fmt::print("makespan   {:g} (stage forward {:g}, backward {:g})\n", r.makespan,
                       a->forward, a->backward);
        else
            fmt::print("makespan   {:g} (stage costs F/B/W {})\n", r.makespan, a->stage_costs);
        fmt::print("idle share per rank: {:.4f}\n", fmt::join(idle_share, " "));
        if (a->vpp == 1) {
            fmt::print("peak in-flight micro-batches per rank: {}\n",
                       fmt::join(r.peak_in_flight, " "));
        } else {
            // A chunk holds 1/vpp of a stage's layers, so vpp chunk activations weigh as much as
            // one micro-batch of a non-interleaved stage.
            std::vector<double> stages;
            for (int n : r.peak_in_flight) stages.push_back(double(n) / a->vpp);
            fmt::print(
                "peak in-flight chunk activations per rank: {} (= {:g} micro-batches of a "
                "whole stage)\n",
                fmt::join(r.peak_in_flight, " "), fmt::join(stages, " "));
        }
    });
}

}  // namespace weft::cli
