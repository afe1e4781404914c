#pragma once
// One value says how a run is parallelised. The mesh is built from it in Megatron's rank order
// (tp fastest, then cp, ep, dp, pp); the planner outputs one and the trainer runs one.
#include <string>

namespace weft {

struct Layout {
    int dp = 0;  // 0: derived as world size / (tp * pp * cp * ep)
    int tp = 1;
    int pp = 1;
    int cp = 1;
    int ep = 1;
    int zero = 0;  // ZeRO stage 0..3 over the dp axis
    bool sequence_parallel = false;
    std::string pp_schedule = "1f1b";  // gpipe | 1f1b | interleaved
    int vpp = 1;                       // virtual pipeline stages per rank (interleaved)
    bool recompute = false;

    // Fills in dp from the world size and checks every degree; throws weft::Error naming every
    // value when the product does not match the world size.
    void resolve(int world_size);
    int world_size() const { return dp * tp * pp * cp * ep; }
    std::string describe() const;
};

}  // namespace weft
