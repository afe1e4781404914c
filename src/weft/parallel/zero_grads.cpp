#include "weft/parallel/zero_grads.hpp"

#include <algorithm>
#include <memory>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"

namespace weft::parallel {

GradReducer::GradReducer(const ZeroLayout& z, const std::vector<Bucket>& buckets, comm::Group& dp,
                         InFlight& inflight, float* grads, bool sharded)
    : z_(z),
      buckets_(buckets),
      dp_(dp),
      inflight_(inflight),
      grads_(grads),
      sharded_(sharded),
      bucket_of_(size_t(z.units()), -1),
      temp_(buckets.size()) {
    for (size_t b = 0; b < buckets.size(); ++b)
        for (int u = buckets[b].first_unit; u <= buckets[b].last_unit; ++u) bucket_of_[u] = int(b);
}

float* GradReducer::unit_grads(int unit) {
    const int64_t offset = z_.padded().units[unit].offset;
    if (!sharded_) return grads_ + offset;
    const int b = bucket_of_[unit];
    const Bucket& k = buckets_[b];
    if (temp_[b].size() == 0) temp_[b] = Buffer(k.end - k.begin);  // zero-filled
    return temp_[b].data() + (offset - k.begin);
}

void GradReducer::ready(int unit, bool last_micro_batch) {
    const int b = bucket_of_[unit];
    WEFT_CHECK(b >= 0, "internal: gradients of unit {}, which this rank does not hold", unit);
    const Bucket& k = buckets_[b];
    if (unit != k.first_unit) return;  // backward completes a bucket with its first unit
    if (!sharded_) {
        if (!last_micro_batch) return;
        std::span<float> data(grads_ + k.begin, size_t(k.end - k.begin));
        inflight_.add(comm::all_reduce_async(dp_, data));
        return;
    }
    // The send buffer must hold rank r's slices of every unit of the bucket as block r.
    struct Pending {
        Buffer send, recv;
    };
    auto p = std::make_shared<Pending>();
    const int n = z_.dp();
    const int64_t block = k.shard_end - k.shard_begin;
    if (k.first_unit == k.last_unit) {
        p->send = std::move(temp_[b]);
    } else {
        p->send = Buffer(k.end - k.begin);
        const Buffer& t = temp_[b];
        for (int r = 0; r < n; ++r)
            for (int u = k.first_unit; u <= k.last_unit; ++u) {
                const ShardSlice& s = z_.slices()[u];
                std::copy_n(t.data() + (z_.slice_begin(u, r) - k.begin), s.size,
                            p->send.data() + r * block + (s.shard_offset - k.shard_begin));
            }
        temp_[b] = Buffer();
    }
    p->recv = Buffer(block);
    comm::Request req = comm::reduce_scatter_async(
        dp_, std::span<const float>(p->send.data(), size_t(p->send.size())),
        std::span<float>(p->recv.data(), size_t(block)));
    float* dst = grads_ + k.shard_begin;
    inflight_.add(std::move(req),
                  [p, dst, block] { kernels::add_inplace(dst, p->recv.data(), block); });
}

}  // namespace weft::parallel
