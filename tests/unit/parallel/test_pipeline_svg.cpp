// The SVG picture and the Chrome trace of a simulated schedule, and costs from measured records.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/simulator.hpp"
#include "weft/parallel/pipeline/svg.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::pipeline {
namespace {

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// Checks that every element is closed in order; returns the first problem, or "" if none.
std::string tag_balance_error(const std::string& xml) {
    std::vector<std::string> open;
    for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
        const size_t end = xml.find('>', at);
        if (end == std::string::npos) return "unterminated tag";
        const std::string tag = xml.substr(at + 1, end - at - 1);
        if (tag.empty()) return "empty tag";
        if (tag[0] == '?' || tag[0] == '!') continue;
        if (tag[0] == '/') {
            if (open.empty() || open.back() != tag.substr(1)) return "unexpected </" + tag;
            open.pop_back();
        } else if (tag.back() != '/') {
            open.push_back(tag.substr(0, tag.find_first_of(" \n")));
        }
        at = end;
    }
    return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

TEST(PipelineSvg, OneRowPerRankAndWellFormed) {
    for (auto [kind, pp, vpp, m] :
         {std::tuple{ScheduleKind::gpipe, 3, 1, 5}, std::tuple{ScheduleKind::one_f_one_b, 4, 1, 8},
          std::tuple{ScheduleKind::interleaved, 4, 2, 8}}) {
        const Schedule s = make_schedule(kind, pp, vpp, m);
        const SimResult r = simulate(s, stage_costs(vpp));
        const std::string svg = schedule_svg(s, r);
        SCOPED_TRACE(svg.substr(0, 400));
        EXPECT_EQ(svg.rfind("<svg", 0), 0u);
        EXPECT_EQ(tag_balance_error(svg), "");
        EXPECT_EQ(count(svg, "<g class=\"rank\""), static_cast<size_t>(pp));
        EXPECT_EQ(count(svg, "data-rank=\"" + std::to_string(pp - 1) + "\""), 1u);
        // One box per compute action, each with a tooltip naming it.
        EXPECT_EQ(count(svg, "<title>forward m"), static_cast<size_t>(pp * vpp * m));
        EXPECT_EQ(count(svg, "<title>backward m"), static_cast<size_t>(pp * vpp * m));
        EXPECT_NE(svg.find(std::string(format_schedule_kind(kind)) + " p=" + std::to_string(pp)),
                  std::string::npos);
        EXPECT_NE(svg.find("bubble"), std::string::npos);
        EXPECT_NE(svg.find("class=\"axis\""), std::string::npos);
    }
}

TEST(PipelineTrace, EventCountAndFields) {
    const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
    const SimResult r = simulate(s, Costs{});
    size_t actions = 0, tails = 0;
    for (const auto& row : r.timeline) {
        actions += row.size();
        if (row.back().end < r.makespan) ++tails;
    }
    EXPECT_EQ(tails, 3u);  // in 1F1B every rank but rank 0 finishes before the makespan

    const nlohmann::json j = chrome_trace(r);
    ASSERT_TRUE(j.contains("traceEvents"));
    size_t complete = 0, meta = 0, idle = 0;
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] == "M") {
            ++meta;
            continue;
        }
        ASSERT_EQ(e["ph"], "X");
        ++complete;
        EXPECT_EQ(e["pid"], e["tid"]);
        EXPECT_GE(e["dur"].get<double>(), 0);
        if (e["cat"] == "idle") ++idle;
    }
    EXPECT_EQ(complete, actions + tails);
    EXPECT_EQ(idle, tails);
    EXPECT_EQ(meta, 2u * s.pp);  // process_name and thread_name per rank

    // The generic writer keeps records as given (the executor's measured times).
    const nlohmann::json g = chrome_trace(std::vector<TraceRecord>{
        {0, "forward m0 c0", "forward", 0, 1500}, {1, "recv_act m0 c1 from 0", "recv", 0, 1500}});
    EXPECT_EQ(g["traceEvents"].size(), 2u + 4u);
    EXPECT_EQ(g["traceEvents"][1]["pid"], 1);
    EXPECT_EQ(g["traceEvents"][0]["dur"], 1500.0);
    EXPECT_EQ(g["traceEvents"][0]["cat"], "forward");
}

}  // namespace
// The costs a zero-bubble schedule is made for, from measured records: per chunk the mean or the
// median over micro-batches (the first micro-batch allocates and is slow), B + W per micro-batch.
TEST(PipelineTrace, MeasuredCosts) {
    std::vector<TraceRecord> recs;
    auto add = [&](int rank, const char* kind, int m, int c, double us) {
        // Half of its wall time on the thread's CPU, as if it had shared a core throughout.
        recs.push_back({rank, fmt::format("{} m{} c{}", kind, m, c), kind, 0, us, us / 2});
    };
    for (int m = 0; m < 3; ++m) {
        add(0, "forward", m, 0, m == 0 ? 90 : 10 + m);
        add(0, "backward_input", m, 0, 20);
        add(0, "backward_weight", m, 0, 5 + m);
        add(1, "forward", m, 1, 40);
        add(1, "backward", m, 1, 30);
        add(1, "send", m, 1, 1000);  // not compute
    }
    const Costs med = measured_costs(2, recs, true), mean = measured_costs(2, recs, false);
    EXPECT_EQ(med.chunk_forward, (std::vector<double>{12, 40}));
    EXPECT_EQ(mean.chunk_forward, (std::vector<double>{(90 + 11 + 12) / 3.0, 40}));
    EXPECT_EQ(med.chunk_backward, (std::vector<double>{26, 30}));
    EXPECT_EQ(med.chunk_weight, (std::vector<double>{6, 0}));
    const Costs cpu = measured_costs(2, recs, true, true);
    EXPECT_EQ(cpu.chunk_forward, (std::vector<double>{6, 20}));
    EXPECT_EQ(cpu.chunk_backward, (std::vector<double>{13, 15}));
    // The CPU time goes into the Chrome trace too.
    EXPECT_EQ(chrome_trace(recs)["traceEvents"][0]["args"]["cpu_us"].get<double>(), 45);
}

}  // namespace weft::pipeline
