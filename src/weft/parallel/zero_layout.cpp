#include "weft/parallel/zero_layout.hpp"

#include <algorithm>

#include "weft/core/buffer.hpp"
#include "weft/core/error.hpp"

namespace weft::parallel {

ZeroLayout::ZeroLayout(const model::ParamLayout& logical, int dp, int rank)
    : padded_(logical), dp_(dp), rank_(rank) {
    WEFT_CHECK(dp >= 1 && rank >= 0 && rank < dp, "internal: rank {} of a dp group of {}", rank,
               dp);
    const int64_t multiple = 16 * int64_t(dp);
    int64_t cursor = 0, shard = 0;
    for (size_t u = 0; u < padded_.units.size(); ++u) {
        const model::Unit old = logical.units[u];
        const int64_t size = (old.size + multiple - 1) / multiple * multiple;
        for (auto& t : padded_.tensors)
            if (t.unit == int(u)) t.offset = t.offset - old.offset + cursor;
        padded_.units[u].offset = cursor;
        padded_.units[u].size = size;
        slices_.push_back({int(u), cursor + rank * (size / dp), size / dp, shard});
        shard += size / dp;
        cursor += size;
    }
    padded_.total = cursor;
}

int64_t ZeroLayout::slice_begin(int unit, int r) const {
    return padded_.units[unit].offset + r * slices_[unit].size;
}

model::ParamLayout unit_layout(const model::ParamLayout& layout, int unit) {
    model::ParamLayout one;
    const model::Unit u = layout.units[unit];
    for (const auto& t : layout.tensors) {
        if (t.unit != unit) continue;
        one.tensors.push_back(t);
        one.tensors.back().offset -= u.offset;
    }
    one.units = {{0, u.size, 0, u.tensors, u.held}};
    one.tp_rank = layout.tp_rank;
    one.tp = layout.tp;
    one.total = u.size;
    return one;
}

void fill_units(const ZeroLayout& z, const UnitFill& fill, float* dst, bool whole) {
    const auto& units = z.padded().units;
    Buffer tmp;
    for (int u = 0; u < z.units(); ++u) {
        if (whole) {
            std::fill_n(dst + units[u].offset, units[u].size, 0.0f);
            fill(u, dst + units[u].offset);
            continue;
        }
        // One unit at a time, so that a shard is filled without the whole model in memory.
        if (tmp.size() < units[u].size) tmp = Buffer(units[u].size);
        std::fill_n(tmp.data(), units[u].size, 0.0f);
        fill(u, tmp.data());
        const ShardSlice& s = z.slices()[u];
        std::copy_n(tmp.data() + z.rank() * s.size, s.size, dst + s.shard_offset);
    }
}

std::vector<Bucket> make_buckets(const ZeroLayout& z, int64_t min_bytes) {
    std::vector<Bucket> buckets;
    const auto& units = z.padded().units;
    const auto& slices = z.slices();
    // Units a pipeline stage does not hold have no gradient: a bucket never starts or ends on
    // one, since its first unit is what completes it in backward.
    int lowest = z.units();
    for (int u = z.units() - 1; u >= 0; --u)
        if (units[u].held) lowest = u;
    int last = -1;
    int64_t bytes = 0;
    for (int u = z.units() - 1; u >= lowest; --u) {
        if (!units[u].held) continue;
        if (last < 0) last = u;
        bytes += units[u].size * int64_t(sizeof(float));
        if (bytes < min_bytes && u > lowest) continue;
        buckets.push_back({u, last, units[u].offset, units[last].offset + units[last].size,
                           slices[u].shard_offset, slices[last].shard_offset + slices[last].size});
        last = -1;
        bytes = 0;
    }
    return buckets;
}

}  // namespace weft::parallel
