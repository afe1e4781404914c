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
    // Per state buffer, the most bytes it holds per element (4 for an fp32 array; 8-bit AdamW's
    // codes 4 where a tensor stays fp32, its absmaxes 8 per block of 2048): the groups weft
    // train --offload streams through its pool are sized by these (offload/streamed_state.hpp).
    std::vector<double> state_widths;
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
// The bytes per element of each state array --offload streams for `name` (AdamW's two moments,
// Lion's one, 8-bit AdamW's three; none for MeZO): the pool's count, offload::pool_bytes.
const std::vector<double>& offload_widths(std::string_view name);
int64_t optimizer_state_bytes(std::string_view name, const model::ParamLayout& layout,
                              int64_t begin, int64_t end);

}  // namespace weft::optim
