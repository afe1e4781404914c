#include "weft/train/tied_embedding.hpp"

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/buffer.hpp"
#include "weft/kernels/elementwise.hpp"

namespace weft::train {

TiedEmbedding::TiedEmbedding(comm::Group& pp, const pipeline::Partition& part, bool tied,
                             int64_t floats)
    : pp_(pp), floats_(floats) {
    if (!tied || pp.size() == 1) return;
    const int first = part.owner(0), last = part.owner(part.chunks() - 1);
    if (pp.rank() == first) peer_ = last;
    if (pp.rank() == last) peer_ = first;
}

void TiedEmbedding::sum_gradients(model::UnitAccess& w) {
    if (!holds_copy()) return;
    constexpr int kTag = comm::tags::kTiedEmbedding;
    float* g = w.grads(0);
    Buffer other(floats_);
    comm::Request r =
        comm::send_async(pp_, std::span<const float>(g, size_t(floats_)), peer_, kTag);
    comm::recv(pp_, std::span<float>(other.data(), size_t(floats_)), peer_, kTag);
    r.wait();
    kernels::add_inplace(g, other.data(), floats_);
}

}  // namespace weft::train
