#pragma once
// One kernel call of the per-document zigzag under the ring (data::DocBlock, docs/long_context.md
// "Per-document zigzag"), as plain numbers: the feed lays the batch out (data/), the model only
// runs the calls, and model code includes no data header.
#include <cstdint>
#include <vector>

namespace weft::model {

// Queries at local rows [q_row, q_row + Tq) of a sequence against the key rank's rows
// [k_row, k_row + Tk) of it, causal by the document positions q_pos0 and k_pos0
// (kernels::AttentionShape's offsets).
struct CpDocBlock {
    int64_t q_row, k_row, Tq, Tk, q_pos0, k_pos0;
};

}  // namespace weft::model

// Ulysses' gather on the per-document zigzag (data::DocOrder, one per sequence), as plain
// numbers: where cp rank r's local row t of sequence b goes in that sequence's gathered rows,
// slots[(b * cp + r) * T_local + t], and the gathered B*T rows' documents (cu_seqlens, the
// varlen kernel's), each run of padding one of its own. Empty: the rows' zigzag.
struct CpDocOrder {
    std::vector<int64_t> slots, cu_seqlens;
};
