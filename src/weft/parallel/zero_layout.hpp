#pragma once
// How ZeRO cuts the flat parameter buffer over the data-parallel ranks.
//
// Every unit (embeddings, a block, the final norm) is padded to a multiple of 16·dp floats and
// cut into dp equal slices; slice r of every unit belongs to rank r. Equal blocks are what
// all-gather and reduce-scatter move, so a unit is gathered or reduce-scattered in one call, and
// 16-float slices start on 64-byte boundaries as the kernels like. A rank's shard is its slices,
// one per unit, back to back in unit order, so the slices of consecutive units (a gradient
// bucket) form one range of the shard.
//
// The padded layout is the model's ParamLayout with the units moved apart to make room for the
// padding: tensor offsets change, offsets within a unit do not, so the model, AdamW and the
// safetensors I/O work on it as they are. With dp = 1 it is the model's layout.
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/model/params.hpp"

namespace weft::parallel {

struct ShardSlice {
    int unit;
    int64_t begin;         // in the padded flat buffer: padded.units[unit].offset + rank * size
    int64_t size;          // floats: the unit's padded size / dp
    int64_t shard_offset;  // where the slice sits in this rank's shard
};

class ZeroLayout {
  public:
    ZeroLayout(const model::ParamLayout& logical, int dp, int rank);

    const model::ParamLayout& padded() const { return padded_; }
    int dp() const { return dp_; }
    int rank() const { return rank_; }
    int units() const { return int(padded_.units.size()); }
    // This rank's slices, one per unit, in unit order.
    const std::vector<ShardSlice>& slices() const { return slices_; }
    int64_t shard_floats() const { return padded_.total / dp_; }
    // Where rank `r`'s slice of `unit` starts in the padded flat buffer.
    int64_t slice_begin(int unit, int r) const;

  private:
    model::ParamLayout padded_;
    int dp_, rank_;
    std::vector<ShardSlice> slices_;
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

// Gradient buckets: consecutive units merged, the last unit first (the order in which backward
// completes them), until a bucket holds at least `min_bytes`.
struct Bucket {
    int first_unit, last_unit;       // inclusive; backward completes first_unit last
    int64_t begin, end;              // range of the padded flat buffer
    int64_t shard_begin, shard_end;  // range of this rank's shard
};
std::vector<Bucket> make_buckets(const ZeroLayout& z, int64_t min_bytes);

}  // namespace weft::parallel
