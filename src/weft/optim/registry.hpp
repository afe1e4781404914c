#pragma once
// The optimizers `weft train --optimizer` knows. Adding one is one file in optim/ (a class
// deriving from Optimizer and a function returning its OptimizerSpec) and one line in
// registry.cpp; the trainer, the checkpoints, the memory estimate and the planner read
// everything else from here.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/optim/optimizer.hpp"

namespace weft::optim {

struct OptimizerSpec {
    std::string_view name;
    std::string_view summary;
    // Bytes of state per parameter of a large tensor, for the floors that are counted before a
    // layout exists (the exact count is the optimizer's own, state_bytes below).
    double bytes_per_param;
    // Whether it steps from gradients: without (zeroth order) no gradient buffer is allocated
    // and the trainer runs forward passes only.
    bool gradients;
    float beta1, beta2;  // its defaults, when --beta1 / --beta2 are not given
    // Whether its state is fp32 arrays, one value per parameter, that any cut of the range
    // steps alike: what weft train --offload streams from disk (offload/streamed_state.hpp).
    bool fp32_per_element;
    // Over [begin, end) of `layout`; with `allocate` false the state is counted, not held.
    std::function<std::unique_ptr<Optimizer>(const model::ParamLayout& layout, int64_t begin,
                                             int64_t end, bool allocate)>
        make;
};

// OptimizerSpec::make for a class constructed as T(layout, begin, end, allocate).
template <class T>
auto factory() {
    return [](const model::ParamLayout& l, int64_t begin, int64_t end, bool allocate) {
        return std::unique_ptr<Optimizer>(new T(l, begin, end, allocate));
    };
}

const std::vector<OptimizerSpec>& optimizers();
// The spec of `name`; an error naming it and the known names when there is none.
const OptimizerSpec& find_optimizer(std::string_view name);
std::string optimizer_names();  // "adamw, adamw8bit, lion, mezo"

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const model::ParamLayout& layout,
                                          int64_t begin, int64_t end);
// Bytes of state the optimizer `name` holds for [begin, end) of `layout`: the one count the
// trainer's estimate and the planner read.
// The state arrays --offload streams for `name` (AdamW's two moments, Lion's one); an error naming
// `flag`, the optimizer and the ones it takes when its state is not fp32 per element.
int offload_streams(std::string_view name, std::string_view flag);
int64_t optimizer_state_bytes(std::string_view name, const model::ParamLayout& layout,
                              int64_t begin, int64_t end);

}  // namespace weft::optim
