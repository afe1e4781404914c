#include "weft/model/family.hpp"

#include <fmt/ranges.h>

#include "weft/core/error.hpp"
#include "weft/model/gpt2_family.hpp"
#include "weft/model/llama_family.hpp"

namespace weft::model {

const std::vector<const Family*>& families() {
    // The registry: a new family adds its files and one line here.
    static const std::vector<const Family*> all = {&gpt2_family(), &llama_family()};
    return all;
}

namespace {
std::vector<std::string> family_names() {
    std::vector<std::string> names;
    for (const Family* f : families()) names.push_back(f->name);
    return names;
}
}  // namespace

const Family& family(const std::string& name) {
    for (const Family* f : families())
        if (f->name == name) return *f;
    fail("unknown model family '{}'; expected one of: {}", name, fmt::join(family_names(), ", "));
}

const Family& family_for_hf_type(const std::string& model_type, const std::string& where) {
    std::vector<std::string> known;
    for (const Family* f : families())
        for (const std::string& t : f->hf_model_types) {
            if (t == model_type) return *f;
            known.push_back(t);
        }
    fail("{}: model_type \"{}\" is not an architecture weft implements; expected one of: {}", where,
         model_type, fmt::join(known, ", "));
}

std::unique_ptr<Model> make_model(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp,
                                  bool sequence_parallel) {
    return family_of(cfg).make(cfg, shard, tp, sequence_parallel);
}

std::vector<int> units_of_span(const ModelConfig& cfg, const LayerSpan& span) {
    std::vector<int> units;
    const int n = span.layers(cfg.n_layer);
    if (span.first == 0) units.push_back(0);
    for (int l = span.first; l < span.first + n; ++l) units.push_back(l + 1);
    if (span.head) {
        units.push_back(int(cfg.n_layer) + 1);
        if (cfg.tie_embeddings && span.first != 0) units.push_back(0);
    }
    return units;
}

}  // namespace weft::model
