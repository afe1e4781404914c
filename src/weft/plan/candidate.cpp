#include "weft/plan/candidate.hpp"

#include <fmt/format.h>

#include "weft/core/error.hpp"

namespace weft::plan {

std::string_view recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none:
            return "none";
        case Recompute::selective:
            return "selective";
        case Recompute::full:
            return "full";
    }
    return "?";
}

Recompute parse_recompute(std::string_view name) {
    if (name == "none") return Recompute::none;
    if (name == "selective") return Recompute::selective;
    if (name == "full") return Recompute::full;
    fail("--recompute must be none, selective or full, got '{}'", name);
}

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
    std::string pipe = l.pp > 1 ? fmt::format(" {}", l.pp_schedule) : "";
    if (l.vpp > 1) pipe += fmt::format(" vpp={}", l.vpp);
    return fmt::format("dp={} tp={} pp={} cp={} zero={}{} mb={}{} recompute={}", l.dp, l.tp, l.pp,
                       l.cp, l.zero, l.sequence_parallel ? " sp" : "", micro_batch, pipe,
                       recompute_name(recompute));
}

int64_t tp_padded_vocab(const model::ModelConfig& cfg, int tp) {
    const int64_t m = cfg.vocab_multiple * tp;
    return (cfg.vocab_size + m - 1) / m * m;
}

double stage_parameters(const model::ModelConfig& cfg, const Layout& l, int stage) {
    const double C = double(cfg.n_embd), t = l.tp;
    const double per_layer = (12 * C * C + 7 * C) / t + 6 * C;
    double p = per_layer * double(cfg.n_layer) / l.pp;
    const double wte = double(tp_padded_vocab(cfg, l.tp)) * C / t;
    if (stage == 0) p += wte + double(cfg.n_positions) * C;
    if (stage == l.pp - 1) p += 2 * C + (l.pp > 1 ? wte : 0);
    return p;
}

}  // namespace weft::plan
