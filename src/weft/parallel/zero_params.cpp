#include "weft/parallel/zero_params.hpp"

#include "weft/comm/collectives.hpp"

namespace weft::parallel {

ParamGatherer::ParamGatherer(const ZeroLayout& z, comm::Group& dp, InFlight& inflight,
                             BufferPool& pool, const float* shard, comm::Group* edp)
    : z_(z),
      dp_(dp),
      edp_(edp),
      inflight_(inflight),
      pool_(pool),
      shard_(shard),
      full_(size_t(z.units())),
      tickets_(size_t(z.units())) {}

void ParamGatherer::begin_phase(bool forward) {
    const int units = z_.units();
    order_.clear();
    if (forward) {
        for (int u = 0; u < units; ++u) order_.push_back(u);
    } else {
        for (int u = units - 1; u >= 1; --u) order_.push_back(u);
    }
    cursor_ = 0;
    post(order_.front());
}

void ParamGatherer::post(int unit) {
    if (full_[unit].size() != 0) return;  // resident, or its gather is in flight
    const int64_t unit_begin = z_.padded().units[unit].offset;
    // The parts' gathers write every float of the padded unit.
    full_[unit] = pool_.take(z_.padded().units[unit].size);
    // One gather per part, each over the group its slices are cut over.
    for (int i = z_.first_slice(unit); i < z_.first_slice(unit + 1); ++i) {
        const ShardSlice& s = z_.slices()[size_t(i)];
        const int64_t part = s.size * z_.group_size(s);
        if (part == 0) continue;
        tickets_[unit].push_back(inflight_.add(comm::all_gather_async(
            s.expert ? *edp_ : dp_, std::span<const float>(shard_ + s.shard_offset, size_t(s.size)),
            std::span<float>(full_[unit].data() + (s.part_begin - unit_begin), size_t(part)))));
    }
}

float* ParamGatherer::acquire(int unit) {
    post(unit);
    for (uint64_t t : tickets_[unit]) inflight_.wait(t);
    tickets_[unit].clear();
    if (cursor_ < order_.size() && order_[cursor_] == unit && ++cursor_ < order_.size())
        post(order_[cursor_]);
    return full_[unit].data();
}

void ParamGatherer::release(int unit) {
    for (uint64_t t : tickets_[unit])
        if (!inflight_.done(t)) return;  // a prefetch in flight
    tickets_[unit].clear();
    pool_.give(std::move(full_[unit]));
}

}  // namespace weft::parallel
