#include "weft/train/manifest_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/model/params.hpp"
#include "weft/train/checkpoint.hpp"

namespace weft::train {

namespace {

std::string describe(const model::ModelConfig& cfg) {
    return fmt::format("{} with n_layer {}, n_head {}, n_embd {}, vocab_size {}", cfg.family,
                       cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size);
}

void check_tensor_list(const nlohmann::json& tensors, const model::ParamLayout& logical,
                       const std::string& where, const std::string& model) {
    std::map<std::string, const nlohmann::json*> listed;
    for (const nlohmann::json& t : tensors) listed[t.at("name").get<std::string>()] = &t;
    for (const auto& [name, t] : listed) {
        const auto it = std::find_if(logical.tensors.begin(), logical.tensors.end(),
                                     [&](const model::ParamSpec& p) { return p.name == name; });
        WEFT_CHECK(it != logical.tensors.end(),
                   "{}: lists tensor {}, which the model of its config ({}) does not have", where,
                   name, model);
        const auto shape = t->at("shape").get<std::vector<int64_t>>();
        WEFT_CHECK(shape == it->shape,
                   "{}: tensor {} has shape [{}], expected [{}] for the model of its config ({})",
                   where, name, fmt::join(shape, ", "), fmt::join(it->shape, ", "), model);
        const int tp_dim = t->at("tp_dim").get<int>();
        WEFT_CHECK(tp_dim == it->tp_dim,
                   "{}: tensor {} has tp_dim {}, expected {} for the model of its config ({})",
                   where, name, tp_dim, it->tp_dim, model);
    }
    for (const model::ParamSpec& p : logical.tensors)
        WEFT_CHECK(listed.count(p.name),
                   "{}: the model of its config ({}) has tensor {} [{}], which the manifest does "
                   "not list",
                   where, model, p.name, fmt::join(p.shape, ", "));
}

// Logical elements [begin, end) of a tensor, held by shard file `shard`.
struct Run {
    int64_t begin, end;
    int shard;
};

// Every range as the runs of logical elements it holds: a stored row maps to consecutive
// logical elements whatever the writer's tensor-parallel split, so a range is at most one run
// per row (one in all when the writer was not split).
std::map<std::pair<std::string, std::string>, std::vector<Run>> logical_runs(
    const ckpt::Manifest& m, const model::ModelConfig& cfg, const std::string& where) {
    std::map<std::array<int, 4>, model::ParamLayout> writers;
    std::map<std::pair<std::string, std::string>, std::vector<Run>> runs;
    for (size_t s = 0; s < m.shards.size(); ++s) {
        const ckpt::ShardEntry& e = m.shards[s];
        const std::array<int, 4> key{e.tp_rank, e.tp, e.ep_rank, e.ep};
        auto w = writers.find(key);
        if (w == writers.end())
            w = writers.emplace(key, writer_param_layout(cfg, e.tp_rank, e.tp, e.ep_rank, e.ep))
                    .first;
        for (const ckpt::ShardRange& r : e.ranges) {
            const model::ParamSpec& p = w->second.find(r.tensor);
            WEFT_CHECK(r.end <= p.numel_stored,
                       "{}: shard {} holds {} range [{}, {}) of {}, beyond the {} elements of its "
                       "shard tp rank {} of {}",
                       where, e.file, r.state, r.begin, r.end, r.tensor, p.numel_stored, e.tp_rank,
                       e.tp);
            std::vector<Run>& out = runs[{r.state, r.tensor}];
            model::for_each_logical_run(
                p, e.tp_rank, e.tp, r.begin, r.end, [&](int64_t, int64_t j, int64_t n) {
                    if (!out.empty() && out.back().shard == int(s) && out.back().end == j)
                        out.back().end += n;
                    else
                        out.push_back({j, j + n, int(s)});
                });
        }
    }
    return runs;
}

}  // namespace

model::ModelConfig check_manifest_model(const ckpt::Manifest& m, const std::string& where) {
    const model::ModelConfig cfg = model::ModelConfig::from_json(m.model, where);
    const model::ParamLayout logical = model::build_param_layout(cfg);
    check_tensor_list(m.tensors, logical, where, describe(cfg));
    auto runs = logical_runs(m, cfg, where);
    for (StateTensors which : kStateTensorOrder) {
        for (const model::ParamSpec& p : logical.tensors) {
            const int64_t n = p.numel_logical();
            auto it = runs.find({state_name(which), p.name});
            WEFT_CHECK(it != runs.end(), "{}: no shard holds {} of tensor {}", where,
                       state_name(which), p.name);
            std::vector<Run>& v = it->second;
            std::sort(v.begin(), v.end(),
                      [](const Run& a, const Run& b) { return a.begin < b.begin; });
            auto gap = [&](int64_t begin, int64_t end) {
                fail(
                    "{}: elements [{}, {}) of tensor {} ({}) are in no shard's range; expected "
                    "every element of its {} in exactly one range",
                    where, begin, end, p.name, state_name(which), n);
            };
            int64_t next = 0;
            int last = -1;
            for (const Run& r : v) {
                WEFT_CHECK(
                    r.begin >= next,
                    "{}: element {} of tensor {} ({}) is held twice (by ranges of {} and {}); "
                    "expected every element in exactly one range",
                    where, r.begin, p.name, state_name(which), m.shards[size_t(last)].file,
                    m.shards[size_t(r.shard)].file);
                if (r.begin > next) gap(next, r.begin);
                next = r.end;
                last = r.shard;
            }
            if (next < n) gap(next, n);
        }
    }
    return cfg;
}

}  // namespace weft::train
