#include "weft/model/family.hpp"

#include <fmt/ranges.h>

#include <string_view>

#include "weft/core/error.hpp"
#include "weft/model/gpt2_family.hpp"
#include "weft/model/kept_tensor.hpp"
#include "weft/model/llama_family.hpp"
#include "weft/model/moe_block.hpp"
#include "weft/model/qwen2_family.hpp"

namespace weft::model {

const std::vector<const Family*>& families() {
    // The registry: a new family adds its files and one line here.
    static const std::vector<const Family*> all = {&gpt2_family(), &llama_family(),
                                                   &qwen2_family()};
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

namespace {

// Hugging Face models that look like a family weft has but compute something it does not: a
// clear refusal beats a model that loads and answers differently.
const std::vector<std::pair<std::string, std::string>> kRefusedHfTypes = {
    {"mistral", "Mistral uses sliding-window attention, which weft does not implement"},
};

}  // namespace

const Family& family_for_hf(const ckpt::HfModelId& id, const std::string& file) {
    std::vector<std::string> known;
    const Family* by_type = nullptr;
    const Family* by_arch = nullptr;
    std::string arch_type;  // the model_type the architectures class belongs to
    for (const Family* f : families())
        for (const HfModelType& t : f->hf_model_types) {
            known.push_back(fmt::format("\"{}\"", t.model_type));
            if (t.model_type == id.model_type) by_type = f;
            if (t.architecture == id.architecture) by_arch = f, arch_type = t.model_type;
        }
    const std::string supported = fmt::format("{}", fmt::join(known, ", "));
    if (id.model_type.empty()) {
        WEFT_CHECK(by_arch,
                   "{} has no \"model_type\" and no architectures weft knows (expected model_type "
                   "{})",
                   file, supported);
        return *by_arch;
    }
    for (const auto& [type, reason] : kRefusedHfTypes)
        WEFT_CHECK(id.model_type != type,
                   "{}: model_type \"{}\" is not supported: {} (weft supports {})", file, type,
                   reason, supported);
    WEFT_CHECK(by_type, "{}: model_type \"{}\" is not supported (weft supports {})", file,
               id.model_type, supported);
    WEFT_CHECK(!by_arch || arch_type == id.model_type,
               "{}: model_type is \"{}\" but architectures is [\"{}\"], a \"{}\" class", file,
               id.model_type, id.architecture, arch_type);
    return *by_type;
}

int64_t activation_floats(const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span) {
    const Family& f = family_of(cfg);
    int64_t floats = f.activation_floats(cfg, B, T, span);
    if (!span.deferred_weights) return floats;
    // The MoE layer queues its own W (its experts' products are grouped by rows, not the
    // listed shapes).
    int64_t per_layer = cfg.n_experts > 0 ? MoeMlp::deferred_floats(cfg, B * T) : 0;
    for (const LinearShape& l : f.layer_linears(cfg)) {
        if (std::string_view(l.name).starts_with("block_sparse_moe.")) continue;
        const int64_t n = B * T * (l.column_parallel ? l.out / span.tp : l.out);
        per_layer += KeptTensor::floats(n, span.bf16 && l.bf16_dout);
    }
    return floats + per_layer * span.layers(cfg.n_layer);
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
