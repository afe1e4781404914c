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

const std::vector<double>& offload_widths(std::string_view name) {
    return find_optimizer(name).state_widths;
}

int64_t optimizer_state_bytes(std::string_view name, const model::ParamLayout& layout,
                              int64_t begin, int64_t end) {
    return find_optimizer(name).make(layout, begin, end, false)->state_bytes();
}

}  // namespace weft::optim
