#include "weft/parallel/zero_grads.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/parallel/bf16_wire.hpp"

namespace weft::parallel {

GradReducer::GradReducer(const ZeroLayout& z, const std::vector<Bucket>& buckets, comm::Group& dp,
                         InFlight& inflight, float* grads, bool sharded, bool bf16,
                         comm::Group* expert_dp)
    : z_(z),
      buckets_(buckets),
      dp_(dp),
      inflight_(inflight),
      grads_(grads),
      sharded_(sharded),
      bucket_of_(size_t(z.units()), -1),
      temp_(buckets.size()),
      bf16_(bf16 && dp.size() > 1),
      edp_(expert_dp) {
    for (size_t b = 0; b < buckets.size(); ++b)
        for (int u = buckets[b].first_unit; u <= buckets[b].last_unit; ++u) bucket_of_[u] = int(b);
    if (!expert_dp) return;
    if (sharded_) return;  // the layout's parts say which group each slice reduces over
    runs_.resize(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
        std::vector<Run>& runs = runs_[b];
        auto add = [&runs](int64_t begin, int64_t end, comm::Group* g) {
            if (begin >= end) return;
            if (!runs.empty() && runs.back().group == g && runs.back().end == begin)
                runs.back().end = end;
            else
                runs.push_back({begin, end, g});
        };
        int64_t at = buckets[b].begin;
        for (const model::ParamSpec& p : z.padded().tensors) {
            if (!p.expert || p.offset < buckets[b].begin || p.offset >= buckets[b].end) continue;
            add(at, p.offset, &dp);
            add(p.offset, p.offset + p.numel_stored, expert_dp);
            at = p.offset + p.numel_stored;
        }
        add(at, buckets[b].end, &dp);
    }
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
        if (!runs_.empty()) {
            for (const Run& r : runs_[size_t(b)]) {
                if (bf16_)
                    post_run_bf16(*r.group, r.begin, r.end);
                else
                    inflight_.add(comm::all_reduce_async(
                        *r.group, std::span<float>(grads_ + r.begin, size_t(r.end - r.begin))));
            }
            return;
        }
        if (bf16_) return post_run_bf16(dp_, k.begin, k.end);
        std::span<float> data(grads_ + k.begin, size_t(k.end - k.begin));
        inflight_.add(comm::all_reduce_async(dp_, data));
        return;
    }
    if (edp_) return post_sharded_parts(b);
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
                const ShardSlice& s = z_.slices()[size_t(z_.first_slice(u))];
                std::copy_n(t.data() + (z_.slice_begin(s, r) - k.begin), s.size,
                            p->send.data() + r * block + (s.shard_offset - k.shard_begin));
            }
        temp_[b] = Buffer();
    }
    if (bf16_) {
        struct Wire {
            std::vector<uint16_t> send, recv;
        };
        auto w = std::make_shared<Wire>();
        const int64_t total = int64_t(n) * block;
        w->send.resize(size_t(total));
        w->recv.resize(size_t(total));
        round_to_bf16(w->send.data(), p->send.data(), total);
        p.reset();  // the fp32 bucket is no longer needed
        comm::Request req = comm::all_to_all_async(
            dp_, wire_bytes(std::as_const(w->send), 0, total), wire_bytes(w->recv, 0, total));
        float* dst = grads_ + k.shard_begin;
        inflight_.add(std::move(req), [w, dst, block, n] {
            for (int r = 0; r < n; ++r) add_widened_bf16(dst, w->recv.data() + r * block, block);
        });
        return;
    }
    p->recv = Buffer(block);
    comm::Request req = comm::reduce_scatter_async(
        dp_, std::span<const float>(p->send.data(), size_t(p->send.size())),
        std::span<float>(p->recv.data(), size_t(block)));
    float* dst = grads_ + k.shard_begin;
    inflight_.add(std::move(req),
                  [p, dst, block] { kernels::add_inplace(dst, p->recv.data(), block); });
}

void GradReducer::post_sharded_parts(int b) {
    const Bucket& k = buckets_[b];
    const Buffer temp = std::move(temp_[b]);
    const auto& slices = z_.slices();
    const int first = z_.first_slice(k.first_unit), last = z_.first_slice(k.last_unit + 1);
    // One reduce-scatter per group: block r holds group rank r's slices of the group's parts.
    for (bool expert : {false, true}) {
        std::vector<int> mine;
        int64_t block = 0;
        for (int i = first; i < last; ++i)
            if (slices[size_t(i)].expert == expert && slices[size_t(i)].size > 0) {
                mine.push_back(i);
                block += slices[size_t(i)].size;
            }
        if (block == 0) continue;
        comm::Group& g = expert ? *edp_ : dp_;
        const int n = g.size();
        auto send = std::make_shared<Buffer>(n * block);
        for (int r = 0; r < n; ++r) {
            float* at = send->data() + r * block;
            for (int i : mine) {
                const ShardSlice& s = slices[size_t(i)];
                at = std::copy_n(temp.data() + (z_.slice_begin(s, r) - k.begin), s.size, at);
            }
        }
        if (bf16_ && n > 1) {  // as without ep: the blocks cross in bf16, summed in fp32
            const int64_t total = int64_t(n) * block;
            auto wsend = std::make_shared<std::vector<uint16_t>>(size_t(total));
            auto wrecv = std::make_shared<std::vector<uint16_t>>(size_t(total));
            round_to_bf16(wsend->data(), send->data(), total);
            comm::Request req = comm::all_to_all_async(
                g, wire_bytes(std::as_const(*wsend), 0, total), wire_bytes(*wrecv, 0, total));
            inflight_.add(std::move(req), [this, wsend, wrecv, n, block, mine = std::move(mine)] {
                for (int r = 0; r < n; ++r) {
                    const uint16_t* from = wrecv->data() + r * block;
                    for (int i : mine) {
                        const ShardSlice& s = z_.slices()[size_t(i)];
                        add_widened_bf16(grads_ + s.shard_offset, from, s.size);
                        from += s.size;
                    }
                }
            });
            continue;
        }
        auto recv = std::make_shared<Buffer>(block);
        comm::Request req = comm::reduce_scatter_async(
            g, std::span<const float>(send->data(), size_t(send->size())),
            std::span<float>(recv->data(), size_t(block)));
        inflight_.add(std::move(req), [this, send, recv, mine = std::move(mine)] {
            const float* from = recv->data();
            for (int i : mine) {
                const ShardSlice& s = z_.slices()[size_t(i)];
                kernels::add_inplace(grads_ + s.shard_offset, from, s.size);
                from += s.size;
            }
        });
    }
}

void GradReducer::post_run_bf16(comm::Group& g, int64_t begin, int64_t end) {
    const int n = g.size(), rank = g.rank();
    // Units are padded to 16·dp floats and expert runs aligned to them, so a run splits into
    // equal blocks over dp and over edp.
    const int64_t size = end - begin, block = size / n;
    WEFT_CHECK(size % n == 0, "internal: a run of {} floats does not split over {} ranks", size, n);
    if (n == 1) return;  // nothing to sum (an edp group of one rank)
    auto send = std::make_shared<std::vector<uint16_t>>(size_t(size));
    auto recv = std::make_shared<std::vector<uint16_t>>(size_t(size));
    round_to_bf16(send->data(), grads_ + begin, size);
    auto summed = std::make_shared<std::vector<uint16_t>>(size_t(size), 0);
    bf16_runs_.push_back({&g, begin, end, summed});
    comm::Request req = comm::all_to_all_async(g, wire_bytes(std::as_const(*send), 0, size),
                                               wire_bytes(*recv, 0, size));
    inflight_.add(std::move(req), [send, recv, summed, block, n, rank] {
        std::vector<float> sum(size_t(block), 0.0f);
        for (int r = 0; r < n; ++r) add_widened_bf16(sum.data(), recv->data() + r * block, block);
        round_to_bf16(summed->data() + int64_t(rank) * block, sum.data(), block);
    });
}

void GradReducer::finish() {
    // In the order posted: every rank of a group posted its runs in the same order.
    for (Bf16Run& r : bf16_runs_) {
        const int n = r.group->size(), rank = r.group->rank();
        const int64_t size = r.end - r.begin, block = size / n;
        std::vector<uint16_t>& summed = *r.summed;
        comm::all_gather(*r.group, wire_bytes(std::as_const(summed), rank * block, block),
                         wire_bytes(summed, 0, size));
        widen_bf16(grads_ + r.begin, summed.data(), size);
    }
    bf16_runs_.clear();
}

}  // namespace weft::parallel
