#include "weft/plan/published.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "weft/core/error.hpp"
#include "weft/model/counts.hpp"
#include "weft/plan/json_read.hpp"
#include "weft/plan/search.hpp"

namespace weft::plan {

namespace fs = std::filesystem;

namespace {

NamedModel model_of(const std::string& name, const fs::path& root) {
    const fs::path file = root / "configs/models" / (name + ".json");
    return load_model(fs::is_regular_file(file) ? file.string() : name);
}

Cluster cluster_of(const std::string& name, const fs::path& root) {
    return load_cluster(root / "configs/clusters" / (name + ".json"));
}

// Seconds per step from the authors' figure. Tokens per second per GPU is direct; TFLOP/s per
// GPU is converted with the FLOP count its authors used: "narayanan2021" is Narayanan et al.
// 2021, Eq. 3 (96Bslh²(1 + s/6h + V/16lh), which counts the recomputed forward; Megatron-LM and
// Megatron-DeepSpeed print it), "model" the model FLOPs of model::train_flops_per_token (6N and
// the causal attention, as MFU is defined by Chowdhery et al. 2022).
double published_step(const JsonReader& p, const PublishedRun& r, std::string& text) {
    const model::ModelConfig& cfg = r.work.model.config;
    const double tokens = double(r.work.global_batch * r.work.seq_len);
    if (p.has("tokens_per_s_per_gpu")) {
        const double x = p.positive("tokens_per_s_per_gpu");
        text = fmt::format("{:.0f} tokens/s/GPU", x);
        return tokens / (x * r.devices);
    }
    const double x = p.positive("tflops_per_gpu") * 1e12;
    const std::string how = p.string("flops");
    text = fmt::format("{:.0f} TFLOP/s/GPU ({})", x / 1e12, how);
    double flops;
    if (how == "narayanan2021") {
        const double B = double(r.work.global_batch), s = double(r.work.seq_len);
        const double l = double(cfg.n_layer), h = double(cfg.n_embd), V = double(cfg.vocab_size);
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    } else if (how == "model") {
        flops = tokens * model::train_flops_per_token(cfg, r.work.seq_len);
    } else {
        fail("{}: {}: flops must be narayanan2021 or model, got '{}'", p.file(), p.path("flops"),
             how);
    }
    return flops / (x * r.devices);
}

}  // namespace

std::vector<PublishedRun> load_published_runs(const fs::path& file, const fs::path& root) {
    const JsonReader top = JsonReader::open(file);
    top.only({"runs"});
    const JsonReader runs = top.object("runs");
    std::vector<PublishedRun> out;
    for (const std::string& name : runs.keys()) {
        if (name == "description" || name == "notes") continue;
        const JsonReader j = runs.object(name);
        j.only({"set", "source", "url", "model", "cluster", "devices", "dtype", "global_batch",
                "seq_len", "attention", "swiglu", "tp_overlap", "dp_overlap", "bucket_mb", "layout",
                "published", "assumed", "memory_unchecked"});
        PublishedRun r;
        r.name = name;
        r.set = j.string("set");
        WEFT_CHECK(r.set == "calibration" || r.set == "check",
                   "{}: {}: set must be calibration or check, got '{}'", file.string(),
                   j.path("set"), r.set);
        r.source = j.string("source");
        r.url = j.string("url");
        if (j.has("memory_unchecked")) r.memory_unchecked = j.string("memory_unchecked");
        r.cluster = j.string("cluster");
        r.devices = int(j.integer("devices", 1));
        Workload& w = r.work;
        w.model = model_of(j.string("model"), root);
        w.global_batch = j.integer("global_batch", 1);
        w.seq_len = j.integer("seq_len", 1);
        const std::string dtype = j.string("dtype");
        w.prec = megatron_precision(dtype);
        w.profile = MemoryProfile::korthikanti;
        w.attention = parse_attention(j.string("attention"));
        if (j.has("swiglu")) w.glu = parse_glu_backward(j.string("swiglu"));
        check_glu_backward(w);
        w.tp_overlap = j.boolean("tp_overlap");
        w.dp_overlap = j.boolean("dp_overlap");
        // FSDP reduce-scatters by its wrapping unit (a block), not by Megatron's 25 MiB buckets.
        if (j.has("bucket_mb")) w.bucket_mb = j.positive("bucket_mb");

        const JsonReader l = j.object("layout");
        l.only({"dp", "tp", "pp", "cp", "vpp", "micro_batch", "zero", "sp", "recompute", "schedule",
                "pp_layers", "cp_kind"});
        Layout& lay = r.cand.layout;
        lay.dp = int(l.integer("dp", 1)), lay.tp = int(l.integer("tp", 1));
        lay.pp = int(l.integer("pp", 1)), lay.cp = int(l.integer("cp", 1));
        lay.vpp = int(l.integer("vpp", 1)), lay.zero = int(l.integer("zero", 0));
        lay.sequence_parallel = l.boolean("sp");
        lay.recompute = parse_recompute(l.string("recompute"));
        lay.pp_schedule = parse_schedule_kind(l.string("schedule"));
        if (l.has("cp_kind")) {
            const std::string kind = l.string("cp_kind");
            if (kind == "all-gather")
                r.cand.cp_all_gather = true;
            else
                lay.cp_kind = parse_cp_kind(kind);
        }
        r.cand.micro_batch = l.integer("micro_batch", 1);
        if (l.has("pp_layers")) r.cand.pp_layers = l.string("pp_layers");
        WEFT_CHECK(lay.world_size() == r.devices,
                   "{}: run {}: dp x tp x pp x cp = {} but devices = {}", file.string(), name,
                   lay.world_size(), r.devices);
        if (auto why = check_candidate(w, r.cand))
            fail("{}: run {}: {} ({})", file.string(), name, why->reason, why->detail);
        r.published_step_s = published_step(j.object("published"), r, r.published);
        out.push_back(std::move(r));
    }
    return out;
}

RunCheck check_run(const PublishedRun& run, const fs::path& root) {
    Cluster c = cluster_of(run.cluster, root);
    c.nodes = (run.devices + c.devices_per_node - 1) / c.devices_per_node;
    RunCheck rc{run, evaluate(run.work, c, run.cand), 0};
    rc.error = rc.estimate.step_s / run.published_step_s - 1;
    return rc;
}

std::string published_report(const std::vector<RunCheck>& checks) {
    std::string s = fmt::format("{:<26} {:<11} {:>6} {:>10} {:>10} {:>7} {:>9}  {}\n", "run", "set",
                                "GPUs", "published", "predicted", "error", "memory", "layout");
    std::map<std::string, std::pair<double, double>> sum;  // set -> (sum |e|, worst |e|)
    std::map<std::string, int> n;
    for (const RunCheck& c : checks) {
        s += fmt::format("{:<26} {:<11} {:>6} {:>9.2f}s {:>9.2f}s {:>+6.1f}% {:>6.1f} GiB  {}\n",
                         c.run.name, c.run.set, c.run.devices, c.run.published_step_s,
                         c.estimate.step_s, 100 * c.error, c.estimate.memory.total() / (1 << 30),
                         c.run.cand.describe());
        auto& [total, worst] = sum[c.run.set];
        total += std::abs(c.error), worst = std::max(worst, std::abs(c.error));
        ++n[c.run.set];
    }
    for (const auto& [set, v] : sum)
        s += fmt::format("{}: mean |error| {:.1f}%, worst {:.1f}% over {} runs\n", set,
                         100 * v.first / n[set], 100 * v.second, n[set]);
    return s;
}

}  // namespace weft::plan
