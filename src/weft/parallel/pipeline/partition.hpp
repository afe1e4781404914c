#pragma once
// How the layers of a model are cut into the pp * vpp chunks of a pipeline, and which parameter
// units each pipeline rank then holds. Chunk c (consecutive layers, in forward order) lives on
// rank c % pp, or in a V (zb-v) rank c or 2pp - 1 - c, as in schedule.hpp.
#include <string>
#include <vector>

#include "weft/model/config.hpp"
#include "weft/parallel/pipeline/schedule.hpp"

namespace weft::pipeline {

struct Partition {
    int pp = 1, vpp = 1, n_layer = 0;
    std::vector<int> first, count;  // per chunk: its first layer and how many
    bool vee = false;               // chunks placed in a V (zb-v)

    int chunks() const { return pp * vpp; }
    int owner(int chunk) const { return chunk_owner(chunk, pp, vee); }
    // The chunks rank r runs, in forward order: r, r + pp, ... (in a V: r, 2pp - 1 - r)
    std::vector<int> chunks_of(int rank) const;
    // Units (0 embeddings, 1..L blocks, L+1 final norm and head) rank r holds: what its chunks
    // read (model::units_of_span): its layers; the embeddings on the rank of the first chunk
    // and, for a tied head, on that of the last; the final unit on the rank of the last chunk.
    std::vector<bool> units_of(int rank, const model::ModelConfig& cfg) const;
};

// `layers` is empty (split evenly; the layer count must then divide into the chunks) or
// "3,3,2,2": pp * vpp positive counts adding up to n_layer. Errors name the values. `vee`: the
// chunks are placed in a V (the zb-v schedule; vpp must be 2). `empty_ends`: the first and the
// last chunk may hold no layer (an embedding-only and a head-only chunk, as Llama 3 405B's
// pipeline; the planner prices them, the engine does not run them).
Partition partition_layers(int n_layer, int pp, int vpp, const std::string& layers,
                           bool vee = false, bool empty_ends = false);
// The partition a layout runs: its pp and vpp, in a V under zb-v.
Partition partition_layers(int n_layer, const Layout& l, const std::string& layers,
                           bool empty_ends = false);

}  // namespace weft::pipeline
