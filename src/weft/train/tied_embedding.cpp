#include "weft/train/tied_embedding.hpp"

#include <utility>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/buffer.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/parallel/bf16_wire.hpp"

namespace weft::train {

TiedEmbedding::TiedEmbedding(comm::Group& pp, const pipeline::Partition& part, bool tied,
                             int64_t floats, bool bf16)
    : pp_(pp), floats_(floats), bf16_(bf16) {
    if (!tied || pp.size() == 1) return;
    const int first = part.owner(0), last = part.owner(part.chunks() - 1);
    if (first == last) return;  // one rank holds both ends (the V of zb-v): one table
    if (pp.rank() == first) peer_ = last, first_ = true;
    if (pp.rank() == last) peer_ = first;
}

void TiedEmbedding::sum_gradients(model::UnitAccess& w) {
    if (!holds_copy()) return;
    constexpr int kTag = comm::tags::kTiedEmbedding;
    float* g = w.grads(0);
    if (bf16_) {
        const size_t n = static_cast<size_t>(floats_);
        mine16_.resize(n);
        other16_.resize(n);
        std::vector<uint16_t>&mine = mine16_, &other = other16_;
        parallel::round_to_bf16(mine.data(), g, floats_);
        comm::Request r = comm::send_async(
            pp_, parallel::wire_bytes(std::as_const(mine), 0, floats_), peer_, kTag);
        comm::recv(pp_, parallel::wire_bytes(other, 0, floats_), peer_, kTag);
        r.wait();
        parallel::widen_bf16(g, first_ ? mine.data() : other.data(), floats_);
        parallel::add_widened_bf16(g, first_ ? other.data() : mine.data(), floats_);
        return;
    }
    other_.ensure(floats_);
    Buffer& other = other_;
    comm::Request r =
        comm::send_async(pp_, std::span<const float>(g, size_t(floats_)), peer_, kTag);
    comm::recv(pp_, std::span<float>(other.data(), size_t(floats_)), peer_, kTag);
    r.wait();
    kernels::add_inplace(g, other.data(), floats_);
}

}  // namespace weft::train
