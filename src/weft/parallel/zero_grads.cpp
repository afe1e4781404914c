#include "weft/parallel/zero_grads.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "weft/comm/collectives.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/parallel/bf16_wire.hpp"

namespace weft::parallel {

namespace {

// The pieces [begin, end) of `size` floats (a multiple of `align`): floor(size / min) of them,
// near-equal, each boundary a multiple of `align`; one when size < 2 min.
std::vector<std::pair<int64_t, int64_t>> cut(int64_t size, int64_t min, int64_t align) {
    const int64_t steps = std::max<int64_t>(size / align, 1);
    const int64_t pieces = std::clamp<int64_t>(size / std::max<int64_t>(min, 1), 1, steps);
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t i = 0; i < pieces; ++i)
        out.emplace_back(steps * i / pieces * align,
                         i + 1 == pieces ? size : steps * (i + 1) / pieces * align);
    return out;
}

// Whole: a bucket's runs in buffer order, expert tensors' apart (reduced over edp).
struct Part {
    int64_t begin, end;
    bool expert;
};
std::vector<Part> whole_runs(const ZeroLayout& z, const Bucket& k) {
    std::vector<Part> runs;
    auto add = [&runs](int64_t begin, int64_t end, bool expert) {
        if (begin >= end) return;
        if (!runs.empty() && runs.back().expert == expert && runs.back().end == begin)
            runs.back().end = end;
        else
            runs.push_back({begin, end, expert});
    };
    int64_t at = k.begin;
    if (z.ep() > 1)
        for (const model::ParamSpec& p : z.padded().tensors) {
            if (!p.expert || p.offset < k.begin || p.offset >= k.end) continue;
            add(at, p.offset, false);
            add(p.offset, p.offset + p.numel_stored, true);
            at = p.offset + p.numel_stored;
        }
    add(at, k.end, false);
    return runs;
}

// Sharded: this rank's slices of a bucket's parts of one kind (dense or expert), whose
// concatenation is the block it receives of the group's reduce-scatter.
struct Block {
    std::vector<int> slices;
    int64_t floats = 0;
};
Block sharded_block(const ZeroLayout& z, const Bucket& k, bool expert) {
    Block b;
    for (int i = z.first_slice(k.first_unit); i < z.first_slice(k.last_unit + 1); ++i) {
        const ShardSlice& s = z.slices()[size_t(i)];
        if (s.expert != expert || s.size == 0) continue;
        b.slices.push_back(i);
        b.floats += s.size;
    }
    return b;
}

// Calls f(slice, offset in the slice, offset in the piece, count) for each part of the piece
// [c0, c1) of a block.
template <class F>
void each_part(const ZeroLayout& z, const std::vector<int>& slices, int64_t c0, int64_t c1, F f) {
    int64_t at = 0;  // where the slice starts in the block
    for (int i : slices) {
        const ShardSlice& s = z.slices()[size_t(i)];
        const int64_t b = std::max(c0, at), e = std::min(c1, at + s.size);
        if (b < e) f(s, b - at, b - c0, e - b);
        at += s.size;
    }
}

// In floats: the largest bucket holding unit 0 and the largest other, the largest message one
// piece sends, and (whole) what is reduced over groups of more than one rank.
struct Sizes {
    int64_t first = 0, other = 0, message = 0, summed = 0;
};
Sizes sizes(const ZeroLayout& z, const std::vector<Bucket>& buckets, int64_t bucket_bytes,
            bool sharded) {
    const int64_t min = bucket_bytes / int64_t(sizeof(float));
    int64_t first = 0, other = 0, message = 0, summed = 0;
    for (const Bucket& k : buckets) {
        int64_t& size = k.first_unit == 0 ? first : other;
        size = std::max(size, k.end - k.begin);
        if (!sharded) {
            for (const Part& r : whole_runs(z, k)) {
                const int n = z.group_size(r.expert);
                if (n == 1) continue;
                summed += r.end - r.begin;
                for (auto [c0, c1] : cut(r.end - r.begin, min, 16 * int64_t(n)))
                    message = std::max(message, c1 - c0);
            }
            continue;
        }
        for (bool expert : {false, true}) {
            const Block b = sharded_block(z, k, expert);
            if (b.floats == 0) continue;
            const int n = z.group_size(expert);
            for (auto [c0, c1] : cut(b.floats, min / n, 16))
                message = std::max(message, n * (c1 - c0));
        }
    }
    return {first, other, message, summed};
}

}  // namespace

int64_t reducer_temp_bytes(const ZeroLayout& z, const std::vector<Bucket>& buckets,
                           int64_t bucket_bytes, bool sharded, bool bf16) {
    const auto [first, other, message, summed] = sizes(z, buckets, bucket_bytes, sharded);
    const int64_t f = sizeof(float), k = kMaxInFlight;
    // Whole, fp32: libnbc's copy of each message. bf16: wire out and in, the rounded sums (held
    // until finish), and one piece's fp32 sum.
    if (!sharded) return bf16 ? k * message * f + summed * 2 + message * f : k * message * f;
    // The bucket of unit 0, kept from the tied head's backward on, and the one being filled.
    const int64_t buckets_bytes = (first + other) * f;
    if (bf16)  // one fp32 piece being rounded; the pieces' bf16 wire out and in
        return buckets_bytes + message * f + k * message * 2 * 2;
    // Packed pieces and the all-to-all's received pieces, a whole message each.
    return buckets_bytes + k * 2 * message * f;
}

GradReducer::GradReducer(const ZeroLayout& z, const std::vector<Bucket>& buckets,
                         int64_t bucket_bytes, comm::Group& dp, InFlight& inflight,
                         BufferPool& pool, float* grads, bool sharded, bool bf16,
                         comm::Group* expert_dp)
    : z_(z),
      buckets_(buckets),
      bucket_floats_(bucket_bytes / int64_t(sizeof(float))),
      message_floats_(sizes(z, buckets, bucket_bytes, sharded).message),
      dp_(dp),
      inflight_(inflight),
      pool_(pool),
      grads_(grads),
      sharded_(sharded),
      bucket_of_(size_t(z.units()), -1),
      temp_(buckets.size()),
      bf16_(bf16 && dp.size() > 1),
      edp_(expert_dp) {
    for (size_t b = 0; b < buckets.size(); ++b)
        for (int u = buckets[b].first_unit; u <= buckets[b].last_unit; ++u) bucket_of_[u] = int(b);
    if (sharded_) return;  // the layout's parts say which group each slice reduces over
    runs_.resize(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b)
        for (const Part& r : whole_runs(z, buckets[b]))
            runs_[b].push_back({r.begin, r.end, r.expert ? expert_dp : &dp});
}

template <class Start>
void GradReducer::post(Start start) {
    while (!posted_.empty() && inflight_.done(posted_.front())) posted_.pop_front();
    if (posted_.size() >= size_t(kMaxInFlight)) {
        inflight_.wait(posted_.front());
        posted_.pop_front();
    }
    posted_.push_back(start());
}

float* GradReducer::unit_grads(int unit) {
    const int64_t offset = z_.padded().units[unit].offset;
    if (!sharded_) return grads_ + offset;
    const int b = bucket_of_[unit];
    const Bucket& k = buckets_[b];
    if (temp_[b].size() == 0) temp_[b] = pool_.take_zeroed(k.end - k.begin);
    return temp_[b].data() + (offset - k.begin);
}

void GradReducer::ready(int unit, bool last_micro_batch) {
    const int b = bucket_of_[unit];
    WEFT_CHECK(b >= 0, "internal: gradients of unit {}, which this rank does not hold", unit);
    const Bucket& k = buckets_[b];
    if (unit != k.first_unit) return;  // backward completes a bucket with its first unit
    if (sharded_) return post_sharded(b);
    if (!last_micro_batch) return;
    for (const Run& r : runs_[size_t(b)]) {
        const int64_t align = 16 * int64_t(r.group->size());
        for (auto [c0, c1] : cut(r.end - r.begin, bucket_floats_, align)) {
            if (bf16_) {
                post_run_bf16(*r.group, r.begin + c0, r.begin + c1);
                continue;
            }
            std::span<float> data(grads_ + r.begin + c0, size_t(c1 - c0));
            post([&] { return inflight_.add(comm::all_reduce_async(*r.group, data)); });
        }
    }
}

void GradReducer::post_sharded(int b) {
    const Bucket& k = buckets_[b];
    Buffer temp = std::move(temp_[b]);  // back to the pool once every piece is packed
    for (bool expert : {false, true}) {
        const Block block = sharded_block(z_, k, expert);
        if (block.floats == 0) continue;
        comm::Group& g = expert ? *edp_ : dp_;
        const int n = g.size();
        const auto pieces = cut(block.floats, bucket_floats_ / n, 16);
        for (auto [c0, c1] : pieces) {
            const int64_t len = c1 - c0;
            // Block r of the message: group rank r's part [c0, c1) of this rank's block.
            auto pack = [&] {
                // One unit in one piece: the bucket is already rank-major.
                if (pieces.size() == 1 && block.slices.size() == 1 && k.end - k.begin == n * len)
                    return std::move(temp);
                Buffer send = pool_.take(message_floats_);  // n * len floats written below
                for (int r = 0; r < n; ++r)
                    each_part(z_, block.slices, c0, c1,
                              [&](const ShardSlice& s, int64_t off, int64_t at, int64_t count) {
                                  std::copy_n(temp.data() + (z_.slice_begin(s, r) - k.begin) + off,
                                              count, send.data() + r * len + at);
                              });
                return send;
            };
            // Adds the piece's sum (`from`, len floats) into this rank's shard.
            auto add_into_shard = [this, slices = block.slices, c0, c1](const auto* from,
                                                                        auto add) {
                each_part(z_, slices, c0, c1,
                          [&](const ShardSlice& s, int64_t off, int64_t at, int64_t count) {
                              add(grads_ + s.shard_offset + off, from + at, count);
                          });
            };
            if (bf16_ && n > 1) {  // the blocks cross in bf16 and are summed in fp32
                post([&] {
                    const int64_t total = n * len;
                    auto send = std::make_shared<Bf16Buffer>(pool_.take_bf16(message_floats_));
                    auto recv = std::make_shared<Bf16Buffer>(pool_.take_bf16(message_floats_));
                    Buffer packed = pack();
                    round_to_bf16(send->data(), packed.data(), total);
                    pool_.give(std::move(packed));
                    comm::Request req = comm::all_to_all_async(
                        g, wire_bytes(std::as_const(*send), 0, total), wire_bytes(*recv, 0, total));
                    return inflight_.add(
                        std::move(req), [this, send, recv, n, len, add_into_shard] {
                            for (int r = 0; r < n; ++r)
                                add_into_shard(recv->data() + r * len, add_widened_bf16);
                            pool_.give(std::move(*send));
                            pool_.give(std::move(*recv));
                        });
                });
                continue;
            }
            // An all-to-all, and the sum here in rank order as the bf16 path does: the bytes of
            // a reduce-scatter, without libnbc's copy of twice the message (mapped afresh for
            // every piece over 32 MiB).
            post([&] {
                auto send = std::make_shared<Buffer>(pack());
                auto recv = std::make_shared<Buffer>(pool_.take(message_floats_));
                comm::Request req =
                    comm::all_to_all_async(g, std::span<const float>(send->data(), size_t(n * len)),
                                           std::span<float>(recv->data(), size_t(n * len)));
                return inflight_.add(std::move(req), [this, send, recv, n, len, add_into_shard] {
                    for (int r = 0; r < n; ++r)
                        add_into_shard(recv->data() + r * len, kernels::add_inplace);
                    pool_.give(std::move(*send));
                    pool_.give(std::move(*recv));
                });
            });
        }
    }
    pool_.give(std::move(temp));
}

void GradReducer::post_run_bf16(comm::Group& g, int64_t begin, int64_t end) {
    const int n = g.size(), rank = g.rank();
    // Units are padded to 16·dp floats, expert runs aligned to them and pieces cut on 16·n,
    // so a piece splits into equal blocks over dp and over edp.
    const int64_t size = end - begin, block = size / n;
    WEFT_CHECK(size % n == 0, "internal: a run of {} floats does not split over {} ranks", size, n);
    if (n == 1) return;  // nothing to sum (an edp group of one rank)
    // Every buffer at the largest piece's size (message_floats_), so that the pool keeps one
    // of each role per piece in flight whatever the pieces' sizes; the sums, held until
    // finish(), one per piece, at the piece's size (the same sizes in the same order each step).
    auto summed = std::make_shared<Bf16Buffer>(pool_.take_bf16(size));
    bf16_runs_.push_back({&g, begin, end, summed});
    post([&] {
        auto send = std::make_shared<Bf16Buffer>(pool_.take_bf16(message_floats_));
        auto recv = std::make_shared<Bf16Buffer>(pool_.take_bf16(message_floats_));
        round_to_bf16(send->data(), grads_ + begin, size);
        comm::Request req = comm::all_to_all_async(g, wire_bytes(std::as_const(*send), 0, size),
                                                   wire_bytes(*recv, 0, size));
        return inflight_.add(std::move(req), [this, send, recv, summed, block, n, rank] {
            Buffer sum = pool_.take(message_floats_);
            sum_widened_blocks(sum.data(), recv->data(), n, block);
            round_to_bf16(summed->data() + int64_t(rank) * block, sum.data(), block);
            pool_.give(std::move(sum));
            pool_.give(std::move(*send));
            pool_.give(std::move(*recv));
        });
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
        pool_.give(std::move(summed));
    }
    bf16_runs_.clear();
}

}  // namespace weft::parallel
