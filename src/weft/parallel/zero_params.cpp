#include "weft/parallel/zero_params.hpp"

#include "weft/comm/collectives.hpp"

namespace weft::parallel {

ParamGatherer::ParamGatherer(const ZeroLayout& z, comm::Group& dp, InFlight& inflight,
                             const float* shard)
    : z_(z),
      dp_(dp),
      inflight_(inflight),
      shard_(shard),
      full_(size_t(z.units())),
      ticket_(size_t(z.units())) {}

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
    const ShardSlice& s = z_.slices()[unit];
    full_[unit] = Buffer(z_.padded().units[unit].size);
    ticket_[unit] = inflight_.add(
        comm::all_gather_async(dp_, std::span<const float>(shard_ + s.shard_offset, size_t(s.size)),
                               std::span<float>(full_[unit].data(), size_t(full_[unit].size()))));
}

float* ParamGatherer::acquire(int unit) {
    post(unit);
    if (ticket_[unit]) {
        inflight_.wait(*ticket_[unit]);
        ticket_[unit].reset();
    }
    if (cursor_ < order_.size() && order_[cursor_] == unit && ++cursor_ < order_.size())
        post(order_[cursor_]);
    return full_[unit].data();
}

void ParamGatherer::release(int unit) {
    if (ticket_[unit] && !inflight_.done(*ticket_[unit])) return;  // a prefetch in flight
    ticket_[unit].reset();
    full_[unit] = Buffer();
}

}  // namespace weft::parallel
