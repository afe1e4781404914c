#include "weft/plan/candidate.hpp"

#include <fmt/format.h>

#include "weft/core/error.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/pipeline/partition.hpp"

namespace weft::plan {

Precision precision(const std::string& dtype) {
    if (dtype == "bf16" || dtype == "fp16") return {dtype, 2, 2, 12, 2, 32};
    if (dtype == "fp32") return {dtype, 4, 4, 8, 4, 36};
    fail("--dtype must be bf16, fp16 or fp32, got '{}'", dtype);
}

std::string_view profile_name(MemoryProfile p) {
    return p == MemoryProfile::engine ? "engine" : "korthikanti";
}

MemoryProfile parse_profile(std::string_view name) {
    if (name == "engine") return MemoryProfile::engine;
    if (name == "korthikanti") return MemoryProfile::korthikanti;
    fail("--memory-profile must be engine or korthikanti, got '{}'", name);
}

std::string Candidate::describe() const {
    const Layout& l = layout;
    std::string pipe = l.pp > 1 ? fmt::format(" {}", format_schedule_kind(l.pp_schedule)) : "";
    if (l.vpp > 1) pipe += fmt::format(" vpp={}", l.vpp);
    return fmt::format("dp={} tp={} pp={} cp={} zero={}{} mb={}{} recompute={}", l.dp, l.tp, l.pp,
                       l.cp, l.zero, l.sequence_parallel ? " sp" : "", micro_batch, pipe,
                       recompute_name(l.recompute));
}

int64_t tp_padded_vocab(const model::ModelConfig& cfg, int tp) {
    const int64_t m = cfg.vocab_multiple * tp;
    return (cfg.vocab_size + m - 1) / m * m;
}

double stage_parameters(const model::ModelConfig& cfg, const Layout& l, int stage) {
    // The tensors the model family declares, as one tp rank of this stage stores them (the
    // engine's own layout, model::build_param_layout: one source for every count).
    model::ModelShard shard;
    if (l.pp > 1)
        shard.units =
            pipeline::partition_layers(int(cfg.n_layer), l.pp, l.vpp, "").units_of(stage, cfg);
    shard.tp = l.tp;
    double p = 0;
    for (const model::ParamSpec& t :
         model::build_param_layout(model::config_for_tp(cfg, l.tp), shard).tensors)
        p += double(t.numel_stored);
    return p;
}

double unit_parameters(const model::ModelConfig& cfg, int tp, int unit) {
    model::ModelShard shard;
    shard.tp = tp;
    const model::ParamLayout layout =
        model::build_param_layout(model::config_for_tp(cfg, tp), shard);
    double p = 0;
    for (const model::ParamSpec& t : layout.tensors)
        if (t.unit == unit) p += double(t.numel_stored);
    return p;
}

}  // namespace weft::plan
