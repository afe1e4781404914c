// Checks of data-parallel training runs, for dp_train.sh (no Python or jq on a fresh machine):
//
//   dp_check losses REF RUN TOL       every step's loss of RUN within TOL (relative) of REF's
//   dp_check weights A B TOL          max |a - b| over the tensors of two safetensors files or
//                                     two checkpoint directories (their logical weights; a
//                                     checkpoint's vocabulary padding rows must be zero)
//   dp_check bound RUN FIELD max|min|peak B  every step's FIELD of RUN at most / at least B,
//                                     or some step's at least B
//   dp_check plan PLAN RUN TOL        `weft plan --doc-lengths --json`'s busiest-rank attention
//                                     FLOPs against RUN's mean rank_attention_flops_max
//   dp_check comm RUN                 per-step bytes on dp equal the analytic counts
//   dp_check memory RUN1 RUN2 RUN4    stage-3 model-state bytes per rank fall as 1/N
//   dp_check wire FP32 BF16 AXIS EXACT  bf16 on the wire: every step, rank 0's bus bytes on AXIS
//                                     in BF16 less the part that stays fp32 are exactly half of
//                                     FP32's less that part. EXACT: `all_reduce` (BF16's
//                                     all-reduces on AXIS, tp's softmax sums), `tied` (the tied
//                                     embedding's gradient a pipeline end stage sends: 4 bytes per
//                                     float of unit 0, padded at dp 1) or a byte count
//
// RUN is a run directory (metrics.jsonl, checkpoints/). The analytic counts are computed here
// from the model's units, independently of weft's own ZeRO layout code. Exit 0 when the check
// holds; prints what it compared either way.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/model/params.hpp"
#include "weft/train/checkpoint.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const fs::path& run) {
    std::ifstream f(run / "metrics.jsonl");
    if (!f) throw std::runtime_error("cannot read " + (run / "metrics.jsonl").string());
    std::vector<json> lines;
    for (std::string s; std::getline(f, s);)
        if (!s.empty()) lines.push_back(json::parse(s));
    return lines;
}

// Training-step lines (not the start/summary events or evaluations).
std::vector<json> step_lines(const fs::path& run) {
    std::vector<json> out;
    for (json& j : read_lines(run))
        if (j.contains("loss")) out.push_back(std::move(j));
    return out;
}

json start_line(const fs::path& run) {
    for (json& j : read_lines(run))
        if (j.value("event", "") == "start") return j;
    throw std::runtime_error("no start line in " + run.string());
}

void parse_layout(const std::string& s, int& dp, int& zero) {
    int tp, pp, cp, ep;
    if (std::sscanf(s.c_str(), "dp=%d tp=%d pp=%d cp=%d ep=%d zero=%d", &dp, &tp, &pp, &cp, &ep,
                    &zero) != 6)
        throw std::runtime_error("cannot parse layout '" + s + "'");
}

// Floats of the padded flat buffer at dp ranks: every unit rounded up to a multiple of 16 * dp.
struct Padded {
    int64_t total = 0, unit0 = 0;
};
Padded padded_count(const weft::model::ParamLayout& layout, int dp) {
    Padded p;
    const int64_t m = 16 * int64_t(dp);
    for (size_t u = 0; u < layout.units.size(); ++u) {
        const int64_t size = (layout.units[u].size + m - 1) / m * m;
        p.total += size;
        if (u == 0) p.unit0 = size;
    }
    return p;
}

weft::model::ParamLayout run_layout(const fs::path& run, nlohmann::json* state = nullptr) {
    weft::train::CheckpointInfo ck = weft::train::open_checkpoint(run);
    if (state) *state = ck.state;
    return weft::model::build_param_layout(ck.cfg);
}

int losses(const fs::path& ref, const fs::path& run, double tol) {
    auto a = step_lines(ref), b = step_lines(run);
    if (a.size() != b.size()) {
        fmt::print("FAIL: {} has {} steps, {} has {}\n", ref.string(), a.size(), run.string(),
                   b.size());
        return 1;
    }
    // The gradient norm is compared too: clipping is active in these runs, and AdamW barely
    // reacts to a constant scaling of every gradient, so a norm counted wrongly (an element on
    // several ranks, say) would pass the loss and weight checks alone.
    double worst = 0, worst_norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = a[i]["loss"], y = b[i]["loss"];
        worst = std::max(worst, std::abs(x - y) / std::abs(x));
        const double gx = a[i]["grad_norm"], gy = b[i]["grad_norm"];
        worst_norm = std::max(worst_norm, std::abs(gx - gy) / std::abs(gx));
    }
    fmt::print(
        "{} vs {}: {} steps, max relative loss difference {:.3g}, grad-norm difference {:.3g} "
        "(tolerance {:g})\n",
        run.string(), ref.string(), a.size(), worst, worst_norm, tol);
    return worst <= tol && worst_norm <= tol ? 0 : 1;
}

// Nonzero floats a checkpoint stores in its weights' vocabulary padding rows. No reader sees them
// (a load reads the logical tensors, padding zero), so a run that moves them resumes differently
// from the uninterrupted one while comparing equal above: the padding must stay zero.
int64_t nonzero_padding(const weft::train::CheckpointInfo& ck) {
    int64_t bad = 0;
    for (const weft::ckpt::ShardEntry& e : ck.manifest.shards) {
        const weft::model::ParamLayout layout =
            weft::train::writer_param_layout(ck.cfg, e.tp_rank, e.tp, e.ep_rank, e.ep);
        std::ifstream f(ck.dir / e.file, std::ios::binary);
        std::vector<float> x;
        for (const weft::ckpt::ShardRange& r : e.ranges) {
            x.resize(size_t(r.floats()));
            f.read(reinterpret_cast<char*>(x.data()), std::streamsize(4 * x.size()));
            if (!f) throw std::runtime_error("cannot read " + (ck.dir / e.file).string());
            if (r.state != "param") continue;
            const weft::model::ParamSpec& p = layout.find(r.tensor);
            for (int64_t i = r.begin; i < r.end; ++i)
                if (weft::model::logical_index(p, e.tp_rank, e.tp, i) < 0 &&
                    x[size_t(i - r.begin)] != 0.0f)
                    ++bad;
        }
    }
    return bad;
}

// A file's tensors, or a checkpoint's logical weights, by name.
std::vector<std::pair<std::string, std::vector<float>>> tensors_of(const fs::path& path) {
    std::vector<std::pair<std::string, std::vector<float>>> out;
    if (fs::is_directory(path)) {
        const weft::train::CheckpointInfo ck = weft::train::open_checkpoint(path);
        if (const int64_t n = nonzero_padding(ck))
            throw std::runtime_error(fmt::format(
                "{} holds {} nonzero floats in vocabulary padding rows, which must stay zero",
                ck.dir.string(), n));
        const weft::model::ParamLayout layout = weft::model::build_param_layout(ck.cfg);
        std::vector<float> flat(static_cast<size_t>(layout.total));
        weft::train::load_checkpoint_params(ck, layout, flat.data());
        for (const auto& p : layout.tensors)
            out.emplace_back(p.name,
                             std::vector<float>(flat.begin() + p.offset,
                                                flat.begin() + p.offset + p.numel_logical()));
        return out;
    }
    auto f = weft::ckpt::SafetensorsFile::open(path);
    for (const auto& t : f.tensors()) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        std::vector<float> x(static_cast<size_t>(n));
        f.read_f32(t.name, t.shape, x.data());
        out.emplace_back(t.name, std::move(x));
    }
    return out;
}

int weights(const fs::path& fa, const fs::path& fb, double tol) {
    const auto a = tensors_of(fa), b = tensors_of(fb);
    double worst = 0;
    std::string where;
    for (const auto& [name, x] : a) {
        auto it = std::find_if(b.begin(), b.end(), [&](const auto& t) { return t.first == name; });
        if (it == b.end() || it->second.size() != x.size()) {
            fmt::print("FAIL: {} has no tensor {} of {} elements\n", fb.string(), name, x.size());
            return 1;
        }
        const std::vector<float>& y = it->second;
        for (size_t i = 0; i < x.size(); ++i)
            if (double d = std::abs(double(x[i]) - double(y[i])); d > worst)
                worst = d, where = name;
    }
    fmt::print("{} vs {}: max |difference| {:.3g} (in {}; tolerance {:g})\n", fb.string(),
               fa.string(), worst, where.empty() ? "-" : where, tol);
    return worst <= tol ? 0 : 1;
}

uint64_t op_bytes(const json& comm, const char* op) {
    if (!comm.contains("dp") || !comm["dp"].contains(op)) return 0;
    return comm["dp"][op]["bytes"].get<uint64_t>();
}

int comm_counts(const fs::path& run) {
    json state;
    const auto layout = run_layout(run, &state);
    const json start = start_line(run);
    int dp, zero;
    parse_layout(start["layout"], dp, zero);
    const int64_t micro = start["micro_batch_size"], batch = state["batch_size"];
    const int64_t accum = batch / (dp * micro);
    const Padded p = padded_count(layout, dp);
    const uint64_t P = 4 * uint64_t(p.total), scalars = 16;  // fp32 buffer; loss and norm
    // Per optimizer step, as docs/data_parallel.md states them. Stages 2-3 reduce-scatter the
    // gradients as an all-to-all and a sum (zero_grads.hpp): MPI's reduce-scatter carries none.
    uint64_t all_reduce = scalars, reduce_scatter = 0, all_gather = 0;
    if (zero <= 1) all_reduce += P;
    if (zero >= 1 && zero <= 2) all_gather = P;
    if (zero >= 2) reduce_scatter = accum * P;
    if (zero == 3) all_gather = accum * (2 * P - 4 * uint64_t(p.unit0));
    if (dp == 1) all_reduce = reduce_scatter = all_gather = 0;  // nothing leaves the rank
    int bad = 0, steps = 0;
    for (const json& line : step_lines(run)) {
        const json comm = line.value("comm", json::object());
        const uint64_t got[4] = {op_bytes(comm, "all_reduce"), op_bytes(comm, "all_to_all"),
                                 op_bytes(comm, "all_gather"), op_bytes(comm, "reduce_scatter")};
        const uint64_t want[4] = {all_reduce, reduce_scatter, all_gather, 0};
        const char* names[4] = {"all_reduce", "all_to_all (the reduce-scatter)", "all_gather",
                                "reduce_scatter"};
        for (int i = 0; i < 4; ++i)
            if (got[i] != want[i]) {
                fmt::print("FAIL: step {}: {} bytes {}, expected {}\n", line["step"].get<int>(),
                           names[i], got[i], want[i]);
                ++bad;
            }
        ++steps;
    }
    fmt::print(
        "{}: dp {} zero {}, {} micro-batch(es) per step, padded parameters {} ({} in unit 0): "
        "per step all_reduce {} B, reduce-scatter (all_to_all) {} B, all_gather {} B on dp; {} "
        "steps, "
        "{}\n",
        run.string(), dp, zero, accum, p.total, p.unit0, all_reduce, reduce_scatter, all_gather,
        steps, bad ? "MISMATCH" : "all equal");
    return bad || steps == 0 ? 1 : 0;
}

int memory(const std::vector<fs::path>& runs) {
    const auto layout = run_layout(runs[0]);
    int64_t one = 0;
    int bad = 0;
    for (const fs::path& run : runs) {
        const json start = start_line(run);
        int dp, zero;
        parse_layout(start["layout"], dp, zero);
        const int64_t bytes = start["model_state_bytes"]["total"];
        // Stage 3: parameters, gradients and both moments, each one shard of the padded buffer.
        const int64_t want = 16 * padded_count(layout, dp).total / dp;
        if (dp == 1) one = bytes;
        const double ratio = one ? double(bytes) * dp / double(one) : 0;
        fmt::print(
            "N = {}: model state {} bytes per rank (expected {}), N x bytes / bytes(N=1) = "
            "{:.5f}\n",
            dp, bytes, want, ratio);
        // Padding to 16 * N floats per unit is the only excess over an exact 1/N.
        const double slack = 16.0 * 16 * dp * double(layout.units.size()) / double(one);
        if (zero != 3 || bytes != want || (one && (ratio < 1 || ratio > 1 + slack))) ++bad;
    }
    return bad ? 1 : 0;
}

double axis_bus(const json& line, const std::string& axis, const char* op) {
    const json comm = line.value("comm", json::object());
    if (!comm.contains(axis) || !comm[axis].contains(op)) return 0;
    return comm[axis][op]["bus_bytes"].get<double>();
}

int wire(const fs::path& fp32, const fs::path& bf16, const std::string& axis,
         const std::string& exact) {
    const auto a = step_lines(fp32), b = step_lines(bf16);
    if (a.size() != b.size() || a.empty()) {
        fmt::print("FAIL: {} has {} steps, {} has {}\n", fp32.string(), a.size(), bf16.string(),
                   b.size());
        return 1;
    }
    double fixed = -1;
    if (exact == "tied")
        fixed = 4.0 * double(padded_count(run_layout(fp32), 1).unit0);
    else if (exact != "all_reduce")
        fixed = std::stod(exact);
    int bad = 0;
    double sum_a = 0, sum_b = 0, sum_e = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = axis_bus(a[i], axis, "total"), y = axis_bus(b[i], axis, "total");
        const double e = fixed >= 0 ? fixed : axis_bus(b[i], axis, "all_reduce");
        sum_a += x, sum_b += y, sum_e += e;
        // Halving must hold exactly, and there must be something to halve.
        if (x - e <= 0 || 2 * (y - e) != x - e) {
            fmt::print("FAIL: step {}: {} bus bytes fp32 {}, bf16 {}, fp32 part {}\n", i + 1, axis,
                       x, y, e);
            ++bad;
        }
    }
    fmt::print(
        "{} bus bytes of rank 0 over {} steps: fp32 {:.0f}, bf16 {:.0f}, of which fp32 either way "
        "{:.0f}: the rest {:.0f} -> {:.0f} ({})\n",
        axis, a.size(), sum_a, sum_b, sum_e, sum_a - sum_e, sum_b - sum_e,
        bad ? "MISMATCH" : "exactly half");
    return bad ? 1 : 0;
}

// Every step's FIELD of RUN at most (`max`) or at least (`min`) BOUND, or some step's at least
// BOUND (`peak`).
int bound(const fs::path& run, const std::string& field, const std::string& side, double limit) {
    const auto lines = step_lines(run);
    if (lines.empty() || (side != "max" && side != "min" && side != "peak"))
        throw std::runtime_error("no steps in " + run.string() + " or bad side '" + side + "'");
    double lo = INFINITY, hi = -INFINITY;
    for (const json& j : lines) {
        if (!j.contains(field))
            throw std::runtime_error("a step of " + run.string() + " has no " + field);
        lo = std::min(lo, j[field].get<double>()), hi = std::max(hi, j[field].get<double>());
    }
    fmt::print("{}: {} over {} steps from {:.3g} to {:.3g} ({} {:g})\n", run.string(), field,
               lines.size(), lo, hi,
               side == "max"   ? "every step at most"
               : side == "min" ? "every step at least"
                               : "some step at least",
               limit);
    return (side == "max" ? hi <= limit : side == "min" ? lo >= limit : hi >= limit) ? 0 : 1;
}

// The planner's busiest-rank attention FLOPs (`weft plan --doc-lengths ... --json`, its best
// layout) against the mean over RUN's steps of the engine's own, within TOL relative.
int plan_documents(const fs::path& plan, const fs::path& run, double tol) {
    std::ifstream f(plan);
    const json p = json::parse(f);
    const double planned = p.at("best").at(0).at("documents").at("busiest_rank_attention_flops");
    double sum = 0;
    const auto lines = step_lines(run);
    for (const json& j : lines) sum += j.at("rank_attention_flops_max").get<double>();
    const double measured = sum / double(lines.size());
    const double diff = std::abs(planned - measured) / measured;
    fmt::print(
        "{}: busiest rank's attention FLOPs planned {:.6g}, measured {:.6g} over {} "
        "steps: relative difference {:.3g} (tolerance {:g})\n",
        run.string(), planned, measured, lines.size(), diff, tol);
    return diff <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "losses" && argc == 5) return losses(argv[2], argv[3], std::atof(argv[4]));
        if (cmd == "weights" && argc == 5) return weights(argv[2], argv[3], std::atof(argv[4]));
        if (cmd == "comm" && argc == 3) return comm_counts(argv[2]);
        if (cmd == "memory" && argc >= 3) return memory({argv + 2, argv + argc});
        if (cmd == "wire" && argc == 6) return wire(argv[2], argv[3], argv[4], argv[5]);
        if (cmd == "bound" && argc == 6)
            return bound(argv[2], argv[3], argv[4], std::atof(argv[5]));
        if (cmd == "plan" && argc == 5) return plan_documents(argv[2], argv[3], std::atof(argv[4]));
        fmt::print(stderr, "usage: dp_check losses|weights|comm|memory|wire|bound|plan ...\n");
        return 2;
    } catch (const std::exception& e) {
        fmt::print("FAIL: {}\n", e.what());
        return 1;
    }
}
