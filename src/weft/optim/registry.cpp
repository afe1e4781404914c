#include "weft/optim/registry.hpp"

#include <fmt/format.h>

#include "weft/core/error.hpp"

namespace weft::optim {

// Each defined in its own file.
OptimizerSpec adamw_spec();
OptimizerSpec adamw8bit_spec();
OptimizerSpec lion_spec();
OptimizerSpec mezo_spec();

const std::vector<OptimizerSpec>& optimizers() {
    static const std::vector<OptimizerSpec> all = {adamw_spec(), adamw8bit_spec(), lion_spec(),
                                                   mezo_spec()};
    return all;
}

std::string optimizer_names() {
    std::string s;
    for (const OptimizerSpec& o : optimizers()) s += (s.empty() ? "" : ", ") + std::string(o.name);
    return s;
}

const OptimizerSpec& find_optimizer(std::string_view name) {
    for (const OptimizerSpec& o : optimizers())
        if (o.name == name) return o;
    fail("--optimizer '{}' is unknown; expected one of {}", name, optimizer_names());
}

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const model::ParamLayout& layout,
                                          int64_t begin, int64_t end) {
    return find_optimizer(name).make(layout, begin, end, true);
}

int offload_streams(std::string_view name, std::string_view flag) {
    const OptimizerSpec& spec = find_optimizer(name);
    std::string ok;
    for (const OptimizerSpec& o : optimizers())
        if (o.fp32_per_element) ok += (ok.empty() ? "" : " or ") + std::string(o.name);
    // 8-bit blocks cannot be cut at any element; MeZO has no state to stream.
    WEFT_CHECK(spec.fp32_per_element,
               "{} with --optimizer {}: the offloaded step streams fp32 state, one value per "
               "parameter, which {} does not keep; expected --optimizer {}",
               flag, name, name, ok);
    return spec.make(model::ParamLayout{}, 0, 0, false)->states();
}

int64_t optimizer_state_bytes(std::string_view name, const model::ParamLayout& layout,
                              int64_t begin, int64_t end) {
    return find_optimizer(name).make(layout, begin, end, false)->state_bytes();
}

}  // namespace weft::optim
