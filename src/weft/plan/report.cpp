#include "weft/plan/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weft/model/counts.hpp"
#include "weft/plan/compare.hpp"

namespace weft::plan {

namespace {

double gib(double b) {
    return b / double(1 << 30);
}

std::string seconds(double s) {
    if (s >= 1) return fmt::format("{:.2f} s", s);
    if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
    return fmt::format("{:.0f} us", s * 1e6);
}

std::string quantity(double x) {  // 124.4M, 175.0B
    if (x >= 1e9) return fmt::format("{:.1f}B", x / 1e9);
    if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
    return fmt::format("{:.0f}", x);
}

}  // namespace

nlohmann::json memory_json(const MemoryBreakdown& m) {
    return {{"weights", m.weights},         {"gradients", m.grads},    {"optimizer", m.optimizer},
            {"activations", m.activations}, {"buffers", m.buffers},    {"runtime", m.runtime},
            {"total", m.total()},           {"offloaded", m.offloaded}};
}

nlohmann::json estimate_json(const Estimate& e) {
    const Candidate& k = e.cand;
    const Layout& l = k.layout;
    nlohmann::json j = {{"layout",
                         {{"dp", l.dp},
                          {"tp", l.tp},
                          {"pp", l.pp},
                          {"cp", l.cp},
                          {"ep", l.ep},
                          {"zero", l.zero},
                          {"sequence_parallel", l.sequence_parallel},
                          {"pp_schedule", std::string(format_schedule_kind(l.pp_schedule))},
                          {"vpp", l.vpp},
                          {"micro_batch", k.micro_batch},
                          {"micro_batches", e.micro_batches},
                          {"recompute", std::string(recompute_name(l.recompute))}}},
                        {"describe", k.describe()},
                        {"step_s", e.step_s},
                        {"tokens_per_s", e.tokens_per_s},
                        {"mfu", e.mfu},
                        {"time",
                         {{"pipeline_s", e.pipeline_s},
                          {"bubble", e.bubble},
                          {"tp_comm_s", e.tp_comm_s},
                          {"cp_comm_s", e.cp_comm_s},
                          {"ep_comm_s", e.ep_comm_s},
                          {"pp_comm_s", e.pp_comm_s},
                          {"dp_comm_s", e.dp_comm_s},
                          {"dp_exposed_s", e.dp_exposed_s},
                          {"optimizer_s", e.optimizer_s}}},
                        {"memory_bytes", memory_json(e.memory)},
                        {"memory_stage", e.memory_stage},
                        {"capacity_bytes", e.capacity},
                        {"fits", e.memory.total() <= e.capacity},
                        {"axes", e.axes}};
    if (e.offloaded)
        j["offload"] = {{"read_bytes", e.offload_read_bytes},
                        {"written_bytes", e.offload_written_bytes},
                        {"io_s", e.offload_io_s},
                        {"pass_s", e.offload_pass_s},
                        {"exposed_s", e.offload_exposed_s},
                        {"behind_forward", e.offload_behind}};
    if (const auto& d = e.documents; d)
        j["documents"] = {{"attention_kept", d->attention_kept},
                          {"imbalance", d->imbalance},
                          {"static_imbalance", d->static_imbalance},
                          {"rows", d->rows},
                          {"busiest_rank_attention_flops", d->busiest_attention_flops}};
    return j;
}

nlohmann::json result_json(const Workload& w, const Cluster& c, const SearchResult& r) {
    nlohmann::json j = {{"model", w.model.name},
                        {"parameters", model::num_parameters(w.model.config)},
                        {"cluster", c.name},
                        {"devices", r.world},
                        {"global_batch", w.global_batch},
                        {"seq_len", w.seq_len},
                        {"dtype", w.prec.name},
                        {"grad_reduce_dtype", w.prec.grad_wire == 2 ? "bf16" : "fp32"},
                        {"memory_profile", std::string(profile_name(w.profile))},
                        {"swiglu", std::string(glu_backward_name(w.glu))},
                        {"considered", r.considered},
                        {"fitting", r.fitting},
                        {"rejected", r.rejected_total()}};
    nlohmann::json reasons = nlohmann::json::object();
    for (const auto& [reason, v] : r.rejected)
        reasons[reason] = {{"count", v.first}, {"example", v.second}};
    j["rejected_by_reason"] = reasons;
    j["best"] = nlohmann::json::array();
    for (const Estimate& e : r.best) j["best"].push_back(estimate_json(e));
    if (r.best.empty() && r.best_unfitting) j["best_unfitting"] = estimate_json(*r.best_unfitting);
    if (r.best.size() >= 2) {
        nlohmann::json why = nlohmann::json::array();
        for (const TermDiff& d : step_differences(r.best[0], r.best[1]))
            why.push_back({{"term", d.term}, {"best_s", d.best}, {"runner_up_s", d.other}});
        j["why_best"] = {{"runner_up", r.best[1].cand.describe()}, {"terms", why}};
    }
    return j;
}

static std::string estimate_rows(int rank, const Estimate& e) {
    const MemoryBreakdown& m = e.memory;
    std::string s = fmt::format(
        "{:>2}. {}\n    step {}  {:.0f} tokens/s  MFU {:.1f}%  ({} micro-batches)\n", rank,
        e.cand.describe(), seconds(e.step_s), e.tokens_per_s, 100 * e.mfu, e.micro_batches);
    s += fmt::format(
        "    time: pipeline {} (bubble {:.1f}%, tp comm {}, cp comm {}, p2p {}), dp comm {} ({} "
        "exposed), optimizer {}\n",
        seconds(e.pipeline_s), 100 * e.bubble, seconds(e.tp_comm_s), seconds(e.cp_comm_s),
        seconds(e.pp_comm_s), seconds(e.dp_comm_s), seconds(e.dp_exposed_s),
        seconds(e.optimizer_s));
    if (e.offloaded)
        s += fmt::format(
            "    offload: disk {} a step (read {:.2f} GB, written {:.2f} GB), optimizer pass {} "
            "{}, {} exposed\n",
            seconds(e.offload_io_s), e.offload_read_bytes / 1e9, e.offload_written_bytes / 1e9,
            seconds(e.offload_pass_s), e.offload_behind ? "behind the next forward" : "in the step",
            seconds(e.offload_exposed_s));
    if (e.cand.layout.ep > 1)
        s += fmt::format("    ep {}: all-to-all {} (within the pipeline time)\n", e.cand.layout.ep,
                         seconds(e.ep_comm_s));
    s += fmt::format(
        "    memory/device (stage {}): weights {:.2f} + grads {:.2f} + optimizer {:.2f} + "
        "activations {:.2f} + buffers {:.2f} + runtime {:.2f} = {:.2f} GiB of {:.1f}\n",
        e.memory_stage, gib(m.weights), gib(m.grads), gib(m.optimizer), gib(m.activations),
        gib(m.buffers), gib(m.runtime), gib(m.total()), gib(e.capacity));
    if (m.offloaded_params > 0)
        s += fmt::format(
            "    offloaded/device: optimizer {:.2f} + master and working weights and gradients "
            "{:.2f} GiB on disk (--offload optimizer+params)\n",
            gib(m.offloaded - m.offloaded_params), gib(m.offloaded_params));
    else if (m.offloaded > 0)
        s += fmt::format(
            "    offloaded/device: optimizer {:.2f} GiB on disk (--offload; under bf16 with the "
            "fp32 master)\n",
            gib(m.offloaded));
    if (!e.axes.empty()) s += fmt::format("    axes: {}\n", fmt::join(e.axes, ", "));
    if (const auto& d = e.documents; d)
        s += fmt::format(
            "    documents: attention {:.3f} of T^2 a window; busiest dp rank {:.2f}x the mean{}\n",
            d->attention_kept, d->imbalance,
            d->rows > 1 || d->static_imbalance != d->imbalance
                ? fmt::format(" (static {:.2f}x), {:.2f}x the rows (padding)", d->static_imbalance,
                              d->rows)
                : "");
    return s;
}

std::string result_text(const Workload& w, const Cluster& c, const SearchResult& r) {
    std::string s = fmt::format(
        "model    {} ({} parameters), global batch {} x {} tokens, {} (memory profile {}{}, "
        "gradients reduced in {})\n",
        w.model.name, quantity(double(model::num_parameters(w.model.config))), w.global_batch,
        w.seq_len, w.prec.name, profile_name(w.profile),
        w.glu == GluBackward::fused ? ", SwiGLU product recomputed by its fused backward" : "",
        w.prec.grad_wire == 2 ? "bf16" : "fp32");
    const double peak = c.device.peak(w.prec.name);
    s += fmt::format("cluster  {}: {} devices ({} nodes x {}) of {}, {} {}, {:.1f} GiB\n", c.name,
                     r.world, c.nodes, c.devices_per_node, c.device.name,
                     peak >= 1e12 ? fmt::format("{:.1f} TFLOP/s", peak / 1e12)
                                  : fmt::format("{:.1f} GFLOP/s", peak / 1e9),
                     w.prec.name, gib(c.device.memory_bytes));
    s += fmt::format("searched {} layouts: {} fit, {} rejected\n", r.considered, r.fitting,
                     r.rejected_total());
    for (const auto& [reason, v] : r.rejected)
        s += fmt::format("  {:>8}  {}  (e.g. {})\n", v.first, reason, v.second);
    s += "\n";
    int i = 0;
    for (const Estimate& e : r.best) s += estimate_rows(++i, e);
    if (r.best.size() >= 2) s += "\n" + why_text(r.best[0], r.best[1]);
    if (r.best.empty()) {
        s += "no layout fits.\n";
        if (r.best_unfitting) {
            s += "fastest layout that does not fit:\n";
            s += estimate_rows(0, *r.best_unfitting);
        }
    }
    return s;
}

}  // namespace weft::plan
