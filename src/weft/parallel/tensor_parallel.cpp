#include "weft/parallel/tensor_parallel.hpp"

#include <span>

#include "weft/comm/collectives.hpp"

namespace weft::parallel {

void GroupTpComm::all_reduce_sum(float* x, int64_t n) {
    if (bf16_) return wire_.all_reduce_sum(group_, x, n);
    all_reduce_sum_exact(x, n);
}

void GroupTpComm::all_reduce_sum_exact(float* x, int64_t n) {
    comm::all_reduce(group_, std::span<float>(x, size_t(n)), comm::ReduceOp::sum);
}

void GroupTpComm::all_reduce_max(float* x, int64_t n) {
    comm::all_reduce(group_, std::span<float>(x, size_t(n)), comm::ReduceOp::max);
}

void GroupTpComm::all_gather(const float* in, float* out, int64_t n) {
    if (bf16_) return wire_.all_gather(group_, in, out, n);
    comm::all_gather(group_, std::span<const float>(in, size_t(n)),
                     std::span<float>(out, size_t(n) * size_t(size())));
}

void GroupTpComm::reduce_scatter_sum(const float* in, float* out, int64_t n) {
    if (bf16_) return wire_.reduce_scatter_sum(group_, in, out, n);
    comm::reduce_scatter(group_, std::span<const float>(in, size_t(n) * size_t(size())),
                         std::span<float>(out, size_t(n)), comm::ReduceOp::sum);
}

}  // namespace weft::parallel
