#include "weft/plan/candidate.hpp"

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "weft/core/error.hpp"
#include "weft/model/family.hpp"
#include "weft/model/params.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/pipeline/partition.hpp"

namespace weft::plan {

Precision precision(const std::string& dtype) {
    if (dtype == "bf16" || dtype == "fp16") return {dtype, 2, 2, 12, 2, 32, 2};
    if (dtype == "fp32") return {dtype, 4, 4, 8, 4, 36, 4};
    fail("--dtype must be bf16, fp16 or fp32, got '{}'", dtype);
}

Precision megatron_precision(const std::string& dtype) {
    // fp16 keeps fp16 gradients and an fp32 copy of them beside the master weights and moments
    // (the table's "float16 param, float16 grads: 20 bytes, distributed 4 + 16/d").
    if (dtype == "fp16") return {dtype, 2, 2, 16, 2, 36, 2};
    if (dtype == "bf16" || dtype == "fp8") return {dtype, 2, 4, 12, 2, 34, 4};
    fail("--dtype must be bf16, fp16 or fp8 for a GPU run, got '{}'", dtype);
}

Precision engine_precision(const std::string& dtype) {
    if (dtype == "bf16") return {dtype, 4, 4, 8, 2, 36, 4};
    if (dtype == "fp32") return precision(dtype);
    fail("--dtype {} with --memory-profile engine: the engine trains in fp32 or bf16", dtype);
}

Precision with_grad_reduce(Precision p, const std::string& dtype) {
    if (dtype == "bf16")
        p.grad_wire = 2;
    else if (dtype == "fp32")
        p.grad_wire = 4;
    else
        fail("--grad-reduce-dtype must be fp32 or bf16, got '{}'", dtype);
    return p;
}

AttentionKind parse_attention(std::string_view name) {
    if (name == "flash") return AttentionKind::flash;
    if (name == "scores") return AttentionKind::scores;
    fail("--attention must be flash or scores, got '{}'", name);
}

std::string_view attention_name(AttentionKind a) {
    return a == AttentionKind::flash ? "flash" : "scores";
}

GluBackward parse_glu_backward(std::string_view name) {
    if (name == "kept") return GluBackward::kept;
    if (name == "fused") return GluBackward::fused;
    fail("--swiglu must be kept or fused, got '{}'", name);
}

std::string_view glu_backward_name(GluBackward g) {
    return g == GluBackward::kept ? "kept" : "fused";
}

void check_glu_backward(const Workload& w) {
    if (w.glu == GluBackward::kept) return;
    WEFT_CHECK(w.profile == MemoryProfile::korthikanti,
               "--swiglu fused needs --memory-profile korthikanti (the engine profile counts what "
               "the engine's own SwiGLU keeps), got --memory-profile {}",
               profile_name(w.profile));
    WEFT_CHECK(model::family_of(w.model.config).korthikanti_terms(w.model.config).glu_product > 0,
               "--swiglu fused is for a gated MLP; {} (family {}) has none", w.model.name,
               w.model.config.family);
    WEFT_CHECK(w.prec.name != "fp8",
               "--swiglu fused describes a bf16/fp16 kernel; under --dtype fp8 Transformer "
               "Engine's down projection keeps its own fp8 copy of the product");
}

Precision with_optimizer(Precision p, const std::string& optimizer) {
    const optim::OptimizerSpec& o = optim::find_optimizer(optimizer);
    // Parameters narrower than fp32 keep an fp32 master copy beside the optimizer's state.
    p.optimizer = (p.param < 4 ? 4.0 : 0.0) + o.bytes_per_param;
    if (!o.gradients) p.grad = p.grad_wire = 0;
    return p;
}

std::string_view profile_name(MemoryProfile p) {
    return p == MemoryProfile::engine ? "engine" : "korthikanti";
}

MemoryProfile parse_profile(std::string_view name) {
    if (name == "engine") return MemoryProfile::engine;
    if (name == "korthikanti") return MemoryProfile::korthikanti;
    fail("--memory-profile must be engine or korthikanti, got '{}'", name);
}

double moe_imbalance(const Workload& w) {
    if (w.moe_imbalance > 0) return w.moe_imbalance;
    // With a capacity, no expert takes more than capacity_factor x its balanced share.
    const double cf = w.model.config.moe_capacity_factor;
    return cf > 0 ? cf : 1.0;
}

std::string Candidate::describe() const {
    const Layout& l = layout;
    std::string pipe = l.pp > 1 ? fmt::format(" {}", format_schedule_kind(l.pp_schedule)) : "";
    if (l.vpp > 1) pipe += fmt::format(" vpp={}", l.vpp);
    const std::string ep = l.ep > 1 ? fmt::format(" ep={}", l.ep) : "";
    // The kind of cp only where there is one; TokenRing is a ring.
    std::string cp;
    if (l.cp > 1)
        cp = cp_all_gather                  ? std::string(" all-gather")
             : l.cp_kind == CpKind::hybrid  ? fmt::format(" hybrid ulysses={}", l.cp_ulysses)
             : l.cp_kind == CpKind::ulysses ? std::string(" ulysses")
             : l.ring_bidirectional         ? std::string(" ring bidirectional")
                                            : std::string(" ring");
    if (!pp_layers.empty()) pipe += fmt::format(" layers={}", pp_layers);
    return fmt::format("dp={}{} tp={} pp={} cp={}{} zero={}{} mb={}{} recompute={}", l.dp, ep, l.tp,
                       l.pp, l.cp, cp, l.zero, l.sequence_parallel ? " sp" : "", micro_batch, pipe,
                       recompute_name(l.recompute));
}

int64_t tp_padded_vocab(const model::ModelConfig& cfg, int tp) {
    const int64_t m = cfg.vocab_multiple * tp;
    return (cfg.vocab_size + m - 1) / m * m;
}

namespace {

// Building a layout declares every tensor by name (GPT-3 175B: about 1,100 named tensors), and a
// search prices thousands of candidates that share a few (tp, pp, stage) shapes: each count is
// made once per shape. Building layouts was 85% of a search's time (callgrind), and made the
// sanitizer build of the planner's tests take minutes.
template <class Make>
double memoized(std::string key, Make make) {
    static std::mutex mutex;
    static std::unordered_map<std::string, double> cache;
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    const double value = make();
    std::lock_guard lock(mutex);
    cache.emplace(std::move(key), value);
    return value;
}

double count_stage_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                              const std::string& pp_layers, bool experts_only) {
    // The tensors the model family declares, as one tp rank of this stage stores them (the
    // engine's own layout, model::build_param_layout: one source for every count).
    model::ModelShard shard;
    if (l.pp > 1) shard.units = plan_partition(cfg, l, pp_layers).units_of(stage, cfg);
    shard.tp = l.tp;
    double p = 0;
    for (const model::ParamSpec& t :
         model::build_param_layout(model::config_for_tp(cfg, l.tp), shard).tensors)
        if (t.expert || !experts_only) p += double(t.numel_stored);
    return p;
}

double count_unit_parameters(const model::ModelConfig& cfg, int tp, int unit) {
    model::ModelShard shard;
    shard.tp = tp;
    const model::ParamLayout layout =
        model::build_param_layout(model::config_for_tp(cfg, tp), shard);
    double p = 0;
    for (const model::ParamSpec& t : layout.tensors)
        if (t.unit == unit) p += double(t.numel_stored);
    return p;
}

}  // namespace

double stage_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                        const std::string& pp_layers) {
    const std::string key = fmt::format("stage {} {} {} {} {} {}", l.tp, l.pp, l.vpp, stage,
                                        pp_layers, cfg.to_json().dump());
    return memoized(key, [&] { return count_stage_parameters(cfg, l, stage, pp_layers, false); });
}

double stage_expert_parameters(const model::ModelConfig& cfg, const Layout& l, int stage,
                               const std::string& pp_layers) {
    if (cfg.n_experts == 0) return 0;
    const std::string key = fmt::format("experts {} {} {} {} {} {}", l.tp, l.pp, l.vpp, stage,
                                        pp_layers, cfg.to_json().dump());
    return memoized(key, [&] { return count_stage_parameters(cfg, l, stage, pp_layers, true); });
}

std::vector<int> chunk_layers(const model::ModelConfig& cfg, const Layout& l,
                              const std::string& pp_layers) {
    if (pp_layers.empty()) return std::vector<int>(l.pp * l.vpp, int(cfg.n_layer) / (l.pp * l.vpp));
    return plan_partition(cfg, l, pp_layers).count;
}

pipeline::Partition plan_partition(const model::ModelConfig& cfg, const Layout& l,
                                   const std::string& pp_layers) {
    return pipeline::partition_layers(int(cfg.n_layer), l, pp_layers, true);
}

double unit_parameters(const model::ModelConfig& cfg, int tp, int unit) {
    const std::string key = fmt::format("unit {} {} {}", tp, unit, cfg.to_json().dump());
    return memoized(key, [&] { return count_unit_parameters(cfg, tp, unit); });
}

}  // namespace weft::plan
