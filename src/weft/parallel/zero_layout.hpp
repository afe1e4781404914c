#pragma once
// How ZeRO cuts the flat parameter buffer over the data-parallel ranks.
//
// Every unit (embeddings, a block, the final norm) is padded to a multiple of 16·dp floats and
// cut into dp equal slices; slice r of every unit belongs to rank r. Equal blocks are what
// all-gather and reduce-scatter move, so a unit is gathered or reduce-scattered in one call, and
// 16-float slices start on 64-byte boundaries as the kernels like. A rank's shard is its slices,
// one per unit (per part with ep, below), back to back in unit order, so the slices of
// consecutive units (a gradient bucket) form one range of the shard.
//
// The padded layout is the model's ParamLayout with the units moved apart to make room for the
// padding: tensor offsets change, offsets within a unit do not, so the model, AdamW and the
// safetensors I/O work on it as they are. With dp = 1 it is the model's layout.
//
// Expert parallelism (the layout's ep > 1): ep ranks hold different experts, so an expert
// tensor's slices go over the expert-data-parallel group (the dp/ep ranks holding the same
// experts; edp rank = dp rank / ep) and the rest over dp. A unit is then cut into parts, each a
// run of tensors of one kind, and each part into slices over its own group: a rank holds one
// slice per part. The model's layout must start and end each expert run on a multiple of
// zero_expert_align(dp) floats from its unit's start (ModelShard::expert_align), so the parts
// split evenly and no offset within a unit moves.
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/model/params.hpp"

namespace weft::parallel {

struct ShardSlice {
    int unit;
    int64_t begin;         // in the padded flat buffer: part_begin + group rank * size
    int64_t size;          // floats: the part's size / its group's size
    int64_t shard_offset;  // where the slice sits in this rank's shard
    // The part of the unit the slice is cut from (the whole unit without ep), and whether it is
    // an expert part, sliced over the expert-data-parallel group rather than dp.
    int64_t part_begin = 0;
    bool expert = false;
};

// The alignment (floats) of expert runs within a unit that ZeRO over `dp` ranks with expert
// parallelism needs: every part then splits into 16-float slices over dp and over edp.
int64_t zero_expert_align(int dp);

class ZeroLayout {
  public:
    // ep is the logical layout's (ParamLayout::ep); it must divide dp.
    ZeroLayout(const model::ParamLayout& logical, int dp, int rank);

    const model::ParamLayout& padded() const { return padded_; }
    int dp() const { return dp_; }
    int rank() const { return rank_; }
    int ep() const { return ep_; }
    int units() const { return int(padded_.units.size()); }
    // This rank's slices, one per part (one per unit without ep), in buffer order.
    const std::vector<ShardSlice>& slices() const { return slices_; }
    // The slices of one unit: slices()[first_slice(unit)] up to first_slice(unit + 1).
    int first_slice(int unit) const { return first_slice_[size_t(unit)]; }
    int64_t shard_floats() const { return shard_floats_; }
    // The size of the group a slice is cut over (dp, or dp / ep for an expert part) and this
    // rank's place in it.
    int group_size(const ShardSlice& s) const { return group_size(s.expert); }
    // The size of the group a part of that kind is cut over.
    int group_size(bool expert) const { return expert ? dp_ / ep_ : dp_; }
    int group_rank(const ShardSlice& s) const { return s.expert ? rank_ / ep_ : rank_; }
    // Where the slice of group rank `r` of the same part as `s` starts in the padded buffer.
    int64_t slice_begin(const ShardSlice& s, int r) const { return s.part_begin + r * s.size; }

  private:
    model::ParamLayout padded_;
    int dp_, rank_, ep_;
    std::vector<ShardSlice> slices_;
    std::vector<int> first_slice_;  // per unit, and one past the last
    int64_t shard_floats_ = 0;
};

// The layout of one unit alone, offsets from the unit's start: a unit can be initialised, read
// or written without a buffer for the whole model.
model::ParamLayout unit_layout(const model::ParamLayout& layout, int unit);

// Fills one unit (laid out as unit_layout(padded, unit), zero-filled) of a whole logical tensor
// set: initialisation, a checkpoint, a Hugging Face model.
using UnitFill = std::function<void(int unit, float* unit_buffer)>;

// Builds each unit with `fill` and keeps what this rank holds: the whole padded buffer when
// `whole` (dst has padded().total floats), else this rank's slices (dst is a shard).
void fill_units(const ZeroLayout& z, const UnitFill& fill, float* dst, bool whole);
// The same, one unit at a time, handing what this rank keeps to `keep(slice, at, n, data)`:
// floats [at, at + n) of the whole padded buffer (slice -1, when `whole`), or slice `slice` of
// z.slices() whole (at its shard_offset), so that it can go elsewhere than a buffer of the whole
// (--offload's files).
using UnitKeep = std::function<void(int slice, int64_t at, int64_t n, const float* data)>;
void fill_units(const ZeroLayout& z, const UnitFill& fill, const UnitKeep& keep, bool whole);

// Gradient buckets: consecutive units merged, the last unit first (the order in which backward
// completes them), until a bucket holds at least `min_bytes`.
struct Bucket {
    int first_unit, last_unit;       // inclusive; backward completes first_unit last
    int64_t begin, end;              // range of the padded flat buffer
    int64_t shard_begin, shard_end;  // range of this rank's shard
};
std::vector<Bucket> make_buckets(const ZeroLayout& z, int64_t min_bytes);

}  // namespace weft::parallel
