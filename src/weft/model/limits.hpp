#pragma once
// The largest sizes weft can hold. ModelConfig::validate refuses a model past them by name, so
// that no count of its tensors overflows: a 2^40 width died in bad_alloc, a 10^12 vocabulary
// would have wrapped.
#include <cstdint>

namespace weft::model {

// Any one size of a model: token ids and positions are 32-bit; layers, heads and experts are
// counted in int.
inline constexpr int64_t kMaxDimension = 2147483647;
// Elements of a tensor, and parameters of a model: the planner counts them in doubles, exact up
// to 2^53.
inline constexpr int64_t kMaxParameters = int64_t(1) << 53;

}  // namespace weft::model
