#include "weft/parallel/zero_layout.hpp"

#include <algorithm>

#include "weft/core/buffer.hpp"
#include "weft/core/error.hpp"

namespace weft::parallel {

int64_t zero_expert_align(int dp) {
    return 16 * int64_t(dp);
}

ZeroLayout::ZeroLayout(const model::ParamLayout& logical, int dp, int rank)
    : padded_(logical), dp_(dp), rank_(rank), ep_(logical.ep) {
    WEFT_CHECK(dp >= 1 && rank >= 0 && rank < dp, "internal: rank {} of a dp group of {}", rank,
               dp);
    WEFT_CHECK(ep_ >= 1 && dp % ep_ == 0,
               "internal: expert-parallel degree {} does not divide dp {}", ep_, dp);
    const int64_t multiple = 16 * int64_t(dp);
    int64_t cursor = 0;
    for (size_t u = 0; u < padded_.units.size(); ++u) {
        const model::Unit old = logical.units[u];
        const int64_t size = (old.size + multiple - 1) / multiple * multiple;
        for (auto& t : padded_.tensors)
            if (t.unit == int(u)) t.offset = t.offset - old.offset + cursor;
        padded_.units[u].offset = cursor;
        padded_.units[u].size = size;
        first_slice_.push_back(int(slices_.size()));
        // Parts: runs of expert or other tensors (one run without ep), from unit offset `at`.
        int64_t at = 0;
        bool expert = false;
        auto cut = [&](int64_t end) {
            ShardSlice s{int(u), 0, 0, shard_floats_, cursor + at, expert};
            s.size = (end - at) / group_size(s);
            s.begin = slice_begin(s, group_rank(s));
            slices_.push_back(s);
            shard_floats_ += s.size;
            at = end;
        };
        for (int t = old.first_tensor; ep_ > 1 && t < old.first_tensor + old.tensors; ++t) {
            const model::ParamSpec& p = logical.tensors[size_t(t)];
            if (p.expert == expert) continue;
            const int64_t begin = p.offset - old.offset;
            WEFT_CHECK(begin % multiple == 0,
                       "internal: tensor {} starts {} floats into its unit, not on a multiple of "
                       "{} (build the layout with ModelShard::expert_align = "
                       "zero_expert_align(dp))",
                       p.name, begin, multiple);
            if (begin > at) cut(begin);
            expert = p.expert;
        }
        cut(size);
        cursor += size;
    }
    first_slice_.push_back(int(slices_.size()));
    padded_.total = cursor;
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
    if (!whole)
        return fill_units(
            z, fill,
            [dst](int, int64_t at, int64_t n, const float* data) {
                std::copy_n(data, n, dst + at);
            },
            false);
    const auto& units = z.padded().units;
    for (int u = 0; u < z.units(); ++u) {
        std::fill_n(dst + units[u].offset, units[u].size, 0.0f);
        fill(u, dst + units[u].offset);
    }
}

void fill_units(const ZeroLayout& z, const UnitFill& fill, const UnitKeep& keep, bool whole) {
    const auto& units = z.padded().units;
    Buffer tmp;
    for (int u = 0; u < z.units(); ++u) {
        // One unit at a time, so that a shard is filled without the whole model in memory.
        if (tmp.size() < units[u].size) tmp = Buffer(units[u].size);
        std::fill_n(tmp.data(), units[u].size, 0.0f);
        fill(u, tmp.data());
        if (whole) {
            keep(-1, units[u].offset, units[u].size, tmp.data());
            continue;
        }
        for (int i = z.first_slice(u); i < z.first_slice(u + 1); ++i) {
            const ShardSlice& s = z.slices()[size_t(i)];
            keep(i, s.shard_offset, s.size, tmp.data() + (s.begin - units[u].offset));
        }
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
        const ShardSlice& end = slices[size_t(z.first_slice(last + 1) - 1)];
        buckets.push_back({u, last, units[u].offset, units[last].offset + units[last].size,
                           slices[size_t(z.first_slice(u))].shard_offset,
                           end.shard_offset + end.size});
        last = -1;
        bytes = 0;
    }
    return buckets;
}

}  // namespace weft::parallel
