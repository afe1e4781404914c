#include "weft/plan/search.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/partition.hpp"

namespace weft::plan {

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t limit) {
    std::vector<int64_t> d;
    for (int64_t i = 1; i <= n && i <= limit; ++i)
        if (n % i == 0) d.push_back(i);
    return d;
}

template <typename T>
std::vector<T> choices(const std::optional<T>& fixed, std::vector<T> all) {
    return fixed ? std::vector<T>{*fixed} : all;
}

// Faster first; at equal time, less memory first (then the order of enumeration).
bool faster(const Estimate& a, const Estimate& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.memory.total() < b.memory.total();
}

}  // namespace

std::optional<Rejection> check_candidate(const Workload& w, const Candidate& k) {
    const Layout& l = k.layout;
    const model::ModelConfig& cfg = w.model.config;
    auto no = [](std::string reason, std::string detail) {
        return std::optional<Rejection>(Rejection{std::move(reason), std::move(detail)});
    };
    if (cfg.n_head % l.tp != 0)
        return no("indivisible: heads % tp", fmt::format("{} heads over tp={}", cfg.n_head, l.tp));
    // Whole key/value heads per rank too (grouped-query attention; GPT-2's equal the heads).
    if (cfg.kv_heads() % l.tp != 0)
        return no("indivisible: kv heads % tp",
                  fmt::format("{} key/value heads over tp={}", cfg.kv_heads(), l.tp));
    if (!k.pp_layers.empty()) {
        std::vector<int> counts;
        try {
            counts = plan_partition(cfg, l, k.pp_layers).count;
        } catch (const Error& e) {
            return no("invalid: pp-layers", e.what());
        }
        // The engine gives every chunk a layer.
        if (w.profile == MemoryProfile::engine &&
            std::find(counts.begin(), counts.end(), 0) != counts.end())
            return no("unsupported: chunk with no layer", k.pp_layers);
    } else if (cfg.n_layer % (int64_t(l.pp) * l.vpp) != 0) {
        return no("indivisible: layers % (pp*vpp)",
                  fmt::format("{} layers over pp={} x vpp={}", cfg.n_layer, l.pp, l.vpp));
    }
    if (w.global_batch % (int64_t(l.dp) * k.micro_batch) != 0)
        return no(
            "indivisible: batch % (dp*micro-batch)",
            fmt::format("global batch {} over dp={} x mb={}", w.global_batch, l.dp, k.micro_batch));
    // Ring attention balances the causal mask by giving each rank two mirrored halves.
    if (l.cp > 1 && w.seq_len % (2 * l.cp) != 0)
        return no("indivisible: seq-len % (2*cp)",
                  fmt::format("sequence {} over 2 x cp={}", w.seq_len, l.cp));
    // Ulysses (alone, or inside the hybrid's groups) splits this tp rank's heads and kv heads.
    const int heads = l.cp_kind == CpKind::ulysses  ? l.cp
                      : l.cp_kind == CpKind::hybrid ? l.cp_ulysses
                                                    : 1;
    if (l.cp > 1 && (heads < 1 || l.cp % heads != 0))
        return no("indivisible: cp % cp-ulysses",
                  fmt::format("cp={} over groups of {}", l.cp, heads));
    if (l.cp > 1 && (cfg.n_head / l.tp % heads != 0 || cfg.kv_heads() / l.tp % heads != 0))
        return no("indivisible: heads/tp % ulysses",
                  fmt::format("{} heads and {} kv heads over tp={} x {} ({})", cfg.n_head,
                              cfg.kv_heads(), l.tp, heads, cp_kind_name(l.cp_kind)));
    if (l.sequence_parallel && l.tp == 1)
        return no("invalid: sequence parallel needs tp > 1", "sp with tp=1");
    if (l.ep < 1) return no("invalid: ep < 1", fmt::format("ep={}", l.ep));
    if (cfg.n_experts == 0 && l.ep != 1)
        return no("invalid: no experts (ep must be 1)", fmt::format("ep={}", l.ep));
    // ep folds over cp x dp (Megatron's MoE parallel folding): the ep group is ep of those
    // ranks, each holding E/ep whole experts.
    if ((l.dp * l.cp) % l.ep != 0)
        return no("indivisible: cp x dp % ep",
                  fmt::format("cp x dp={} over ep={}", l.dp * l.cp, l.ep));
    if (cfg.n_experts % l.ep != 0)
        return no("indivisible: experts % ep",
                  fmt::format("{} experts over ep={}", cfg.n_experts, l.ep));
    // The engine runs MoE layers replicated on every tp rank (no expert tensor parallelism):
    // every tp rank does the whole block's work, which the cost model does not price. On GPUs
    // the experts split over tp (Megatron-Core's expert tensor parallelism).
    if (cfg.n_experts > 0 && l.tp > 1 && w.profile == MemoryProfile::engine)
        return no("unsupported: experts with tp > 1",
                  fmt::format("{} experts over tp={}", cfg.n_experts, l.tp));
    if (l.pp_schedule == ScheduleKind::interleaved) {
        const int64_t m = k.micro_batches(w);
        if (l.pp == 1 || l.vpp == 1)
            return no("invalid: interleaved needs pp > 1 and vpp > 1",
                      fmt::format("pp={} vpp={}", l.pp, l.vpp));
        if (m % l.pp != 0)
            return no("indivisible: micro-batches % pp (interleaved)",
                      fmt::format("{} micro-batches over pp={}", m, l.pp));
    } else if (l.pp_schedule == ScheduleKind::zb_v) {
        if (l.pp == 1 || l.vpp != 2)
            return no("invalid: zb-v needs pp > 1 and vpp = 2",
                      fmt::format("pp={} vpp={}", l.pp, l.vpp));
    } else if (l.pp_schedule == ScheduleKind::zb_h1 && l.pp == 1) {
        return no("invalid: zb-h1 needs pp > 1", "pp=1");
    } else if (l.vpp != 1) {
        return no("invalid: vpp > 1 needs the interleaved schedule",
                  fmt::format("vpp={} with {}", l.vpp, format_schedule_kind(l.pp_schedule)));
    }
    // A W reads its layer's kept inputs after the layers below have run B: full recomputation
    // would have overwritten them (the engine refuses it too).
    if (pipeline::splits_backward(l.pp_schedule) && l.recompute == Recompute::full)
        return no("unsupported: zero-bubble schedule with full recomputation",
                  fmt::format("{} with recompute full", format_schedule_kind(l.pp_schedule)));
    // ZeRO-2/3 shard gradients every micro-batch, which a pipeline's gradient accumulation
    // across micro-batches defeats; DeepSpeed refuses the combination, and so does the engine.
    // FSDP with a pipeline (Llama 3, Megatron-Core's FSDP) reduce-scatters each micro-batch's
    // gradients instead, which the GPU profile prices.
    if (l.zero >= 2 && l.pp > 1 && w.profile == MemoryProfile::engine)
        return no("incompatible: zero >= 2 with pp > 1",
                  fmt::format("zero={} pp={}", l.zero, l.pp));
    return std::nullopt;
}

int64_t SearchResult::rejected_total() const {
    int64_t n = 0;
    for (const auto& [reason, v] : rejected) n += v.first;
    return n;
}

SearchResult search(const Workload& w, const Cluster& c, const SearchSpace& space, int top) {
    SearchResult res;
    const model::ModelConfig& cfg = w.model.config;
    SearchSpace s = space;
    int world = s.devices ? s.devices : c.devices();
    // A fixed dp names the layout's size: degrees left open default to 1.
    if (s.dp && !s.devices) {
        s.tp = s.tp.value_or(1), s.pp = s.pp.value_or(1), s.cp = s.cp.value_or(1);
        world = *s.dp * *s.tp * *s.pp * *s.cp;
    }
    WEFT_CHECK(world >= 1 && world <= c.devices(),
               "the layout needs {} devices but cluster '{}' has {} ({} nodes x {})", world, c.name,
               c.devices(), c.nodes, c.devices_per_node);
    res.world = world;
    auto reject = [&](const std::string& reason, const std::string& example) {
        auto& [n, ex] = res.rejected[reason];
        if (n++ == 0) ex = example;
    };

    EvalCache cache;
    const std::vector<int64_t> all = divisors(world, world);
    std::vector<int> degrees(all.begin(), all.end());
    for (int tp : choices(s.tp, degrees))
        for (int pp : choices(s.pp, degrees))
            for (int cp : choices(s.cp, degrees)) {
                if (world % (int64_t(tp) * pp * cp) != 0) continue;
                const int dp = world / (tp * pp * cp);
                if (s.dp && *s.dp != dp) continue;
                std::vector<int64_t> mbs = {1};
                if (w.global_batch % dp == 0)
                    mbs = divisors(w.global_batch / dp, s.max_micro_batch);
                // Schedules: 1F1B, interleaved for every vpp > 1 dividing the layers, and the
                // zero-bubble zb-h1 and zb-v (a V of two chunks a rank).
                std::vector<std::pair<ScheduleKind, int>> scheds;
                if (s.schedule) {
                    if (*s.schedule == ScheduleKind::interleaved) {
                        for (int v : choices<int>(s.vpp, {2, 3, 4, 6, 8}))
                            scheds.push_back({ScheduleKind::interleaved, v});
                    } else if (*s.schedule == ScheduleKind::zb_v) {
                        scheds.push_back({ScheduleKind::zb_v, 2});
                    } else {
                        scheds.push_back({*s.schedule, s.vpp.value_or(1)});
                    }
                } else {
                    scheds.push_back({ScheduleKind::one_f_one_b, 1});
                    if (pp > 1) {
                        for (int v : choices<int>(s.vpp, {2, 3, 4, 6, 8}))
                            if (v > 1 && cfg.n_layer % (int64_t(pp) * v) == 0)
                                scheds.push_back({ScheduleKind::interleaved, v});
                        scheds.push_back({ScheduleKind::zb_h1, 1});
                        if (cfg.n_layer % (2 * int64_t(pp)) == 0)
                            scheds.push_back({ScheduleKind::zb_v, 2});
                    }
                }
                // Expert parallelism: every ep dividing dp and the experts (1 for a dense model).
                std::vector<int> eps = {1};
                if (cfg.n_experts > 0)
                    for (int64_t e : divisors(dp, dp))
                        if (e > 1 && cfg.n_experts % e == 0) eps.push_back(int(e));
                for (int ep : choices(s.ep, eps))
                    for (int64_t mb : choices(s.micro_batch, mbs))
                        for (auto [sched, vpp] : scheds)
                            for (bool sp :
                                 choices<bool>(s.sp, tp > 1 ? std::vector<bool>{false, true}
                                                            : std::vector<bool>{false}))
                                for (Recompute r : choices<Recompute>(
                                         s.recompute,
                                         {Recompute::none, Recompute::selective, Recompute::full}))
                                    for (int z : choices<int>(
                                             s.zero, dp * cp > 1 ? std::vector<int>{0, 1, 2, 3}
                                                                 : std::vector<int>{0})) {
                                        Candidate k;
                                        k.layout.dp = dp, k.layout.tp = tp, k.layout.pp = pp;
                                        k.layout.ep = ep;
                                        k.layout.cp = cp, k.layout.zero = z;
                                        k.layout.cp_kind = s.cp_kind;
                                        k.layout.cp_ulysses =
                                            s.cp_kind == CpKind::hybrid ? s.cp_ulysses : 0;
                                        k.layout.ring_bidirectional =
                                            s.cp_kind == CpKind::ring && s.ring_bidirectional;
                                        k.layout.sequence_parallel = sp;
                                        k.layout.pp_schedule = sched, k.layout.vpp = vpp;
                                        k.layout.recompute = r;
                                        k.micro_batch = mb;
                                        k.pp_layers = s.pp_layers;
                                        k.cp_all_gather = s.cp_all_gather;
                                        ++res.considered;
                                        if (auto why = check_candidate(w, k)) {
                                            reject(why->reason, why->detail);
                                            continue;
                                        }
                                        Estimate e = evaluate(w, c, k, &cache);
                                        if (e.memory.total() > e.capacity) {
                                            reject("out of memory",
                                                   fmt::format("{} needs {:.1f} GiB of {:.1f}",
                                                               k.describe(),
                                                               e.memory.total() / (1 << 30),
                                                               e.capacity / (1 << 30)));
                                            if (!e.pruned &&
                                                (!res.best_unfitting ||
                                                 e.step_s < res.best_unfitting->step_s))
                                                res.best_unfitting = e;
                                            continue;
                                        }
                                        ++res.fitting;
                                        if (e.pruned) continue;  // slower than the top list
                                        res.best.push_back(std::move(e));
                                        // Keep the list short: sort and trim now and then.
                                        if (res.best.size() > size_t(4 * top + 64)) {
                                            std::stable_sort(res.best.begin(), res.best.end(),
                                                             faster);
                                            res.best.resize(top);
                                            cache.prune_above = res.best.back().step_s;
                                        }
                                    }
            }
    std::stable_sort(res.best.begin(), res.best.end(), faster);
    if (res.best.size() > size_t(top)) res.best.resize(top);
    return res;
}

}  // namespace weft::plan
