#pragma once
// One value says how a run is parallelised, in two parts: the sizes of the five mesh axes, and
// typed options saying how the run uses them. The mesh is built from it in Megatron's rank order
// (tp fastest, then cp, dp, pp), with ep folded over dp (Megatron's MoE parallel folding); the
// planner outputs one and the trainer runs one. Flags are
// parsed into it once (the parse functions below), and resolve() checks it whole, once, so that
// code after it reads plain values.
#include <string>
#include <string_view>

namespace weft {

// The pipeline schedules (parallel/pipeline/schedule.hpp generates them). The zero-bubble ones
// (Qi et al. 2024) split each backward into B (input gradients) and W (weight gradients).
enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1, zb_v };
// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-v"; throws weft::Error naming the bad string
// otherwise.
ScheduleKind parse_schedule_kind(std::string_view name);
// The same, for the value of --pp-schedule: the error names the flag.
ScheduleKind parse_pp_schedule_flag(std::string_view value);
std::string_view format_schedule_kind(ScheduleKind kind);
// Whether the schedule's backward comes as B and W (the zero-bubble kinds).
inline bool splits_backward(ScheduleKind kind) {
    return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_v;
}

// Korthikanti et al. 2022: none; selective (the attention core: softmax, its dropout, QKᵀ);
// full (only each layer's input is kept, the layer re-runs its forward before its backward).
// The planner prices all three; the engine runs none and full.
enum class Recompute { none, selective, full };
std::string_view recompute_name(Recompute r);
Recompute parse_recompute(std::string_view name);  // throws naming the value

// How context parallelism splits attention: K/V blocks around a ring (ring attention),
// all-to-all over heads (DeepSpeed-Ulysses), or both (USP): Ulysses inside groups of
// cp_ulysses consecutive cp ranks, the ring across the groups.
enum class CpKind { ring, ulysses, hybrid };
// "ring" | "ulysses" | "hybrid", for --cp-kind; throws weft::Error naming the bad value.
CpKind parse_cp_kind(std::string_view value);
std::string_view cp_kind_name(CpKind kind);

// The degree of each mesh axis: what comm::Mesh is built from.
struct MeshSizes {
    int dp = 0;  // 0: derived as world size / (tp * pp * cp)
    int tp = 1;
    int pp = 1;
    int cp = 1;
    // Experts split over ep consecutive dp ranks: it divides dp and does not multiply the world
    // (attention sees dp ranks, experts ep x dp/ep of them; comm/mesh.hpp).
    int ep = 1;

    int world_size() const { return dp * tp * pp * cp; }
    // Fills in dp from the world size and checks the degrees (positive, their product the world,
    // ep dividing cp x dp); throws weft::Error naming them and the flags that set them.
    void resolve(int world_size);
    std::string describe() const;  // "dp=2 tp=1 pp=1 cp=1 ep=1"
};

// How a run uses the mesh.
struct ParallelOptions {
    int zero = 0;  // ZeRO stage 0..3 over the dp axis
    bool sequence_parallel = false;
    ScheduleKind pp_schedule = ScheduleKind::one_f_one_b;
    int vpp = 1;  // virtual pipeline stages per rank (interleaved)
    Recompute recompute = Recompute::none;
    CpKind cp_kind = CpKind::ring;    // with cp > 1
    int cp_ulysses = 0;               // hybrid: the Ulysses group's size, dividing cp
    bool ring_bidirectional = false;  // ring only: TokenRing (queries out, partial results back)
};

// The two parts are bases, not members, so that a degree reads as layout.tp and an option as
// layout.zero wherever a Layout is used. comm::Mesh takes the MeshSizes part alone: the mesh
// lays out ranks and knows no option.
struct Layout : MeshSizes, ParallelOptions {
    // MeshSizes::resolve, then every option and every combination of options and degrees;
    // throws weft::Error naming them (and the flags that set them).
    void resolve(int world_size);
    std::string describe() const;
};

}  // namespace weft
