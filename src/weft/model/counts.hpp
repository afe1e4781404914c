#pragma once
// The counts the trainer, the benchmarks and the planner share (parameters, FLOPs), computed
// from the family's parameter declaration (family.hpp), so there is one source for each. Free
// functions rather than ModelConfig members: the config is a value type and does not call the
// family registry to describe itself.
#include <cstdint>

#include "weft/model/config.hpp"

namespace weft::model {

// Parameters of the logical model (vocabulary not padded), as Hugging Face counts them: the sum
// of the tensors the family declares.
int64_t num_parameters(const ModelConfig& cfg);
// The same count in long double, so that a count past int64 can be refused (ModelConfig::validate)
// rather than wrapped. Throws weft::Error for a tensor too large to declare.
long double parameter_count(const ModelConfig& cfg);
// The parameters one token is multiplied by: all but the experts it is not routed to (a dense
// model: num_parameters).
int64_t active_parameters(const ModelConfig& cfg);
// Training FLOPs per token at sequence length T: 6 per active parameter per token (forward 2,
// backward 4) plus causal attention, 6 * n_layer * T * n_head * head_dim (QKᵀ and PV, each
// 2·T·width per token in forward, halved by the causal mask, times 3 for forward and backward).
double train_flops_per_token(const ModelConfig& cfg, int64_t T);
// Training FLOPs of causal attention over documents whose lengths' squares sum to `squares`
// (one sequence of T: T^2), at the rate above: 6 * n_layer * n_head * head_dim per unit. Per
// token of a sequence of T that is T units, the attention part of train_flops_per_token; packed
// documents cost the sum of their own squares (docs/long_context.md).
double attention_train_flops(const ModelConfig& cfg, double squares);

}  // namespace weft::model
