#include "weft/core/layout.hpp"

#include <fmt/format.h>

#include <optional>

#include "weft/core/error.hpp"

namespace weft {

namespace {

std::optional<ScheduleKind> schedule_kind_named(std::string_view name) {
    if (name == "gpipe") return ScheduleKind::gpipe;
    if (name == "1f1b") return ScheduleKind::one_f_one_b;
    if (name == "interleaved") return ScheduleKind::interleaved;
    if (name == "zb-h1") return ScheduleKind::zb_h1;
    if (name == "zb-v") return ScheduleKind::zb_v;
    return std::nullopt;
}

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
    if (auto kind = schedule_kind_named(name)) return *kind;
    fail("unknown pipeline schedule '{}', expected gpipe, 1f1b, interleaved, zb-h1 or zb-v", name);
}

ScheduleKind parse_pp_schedule_flag(std::string_view value) {
    if (auto kind = schedule_kind_named(value)) return *kind;
    fail("--pp-schedule must be gpipe, 1f1b, interleaved, zb-h1 or zb-v, got '{}'", value);
}

std::string_view format_schedule_kind(ScheduleKind kind) {
    switch (kind) {
        case ScheduleKind::gpipe:
            return "gpipe";
        case ScheduleKind::one_f_one_b:
            return "1f1b";
        case ScheduleKind::interleaved:
            return "interleaved";
        case ScheduleKind::zb_h1:
            return "zb-h1";
        case ScheduleKind::zb_v:
            return "zb-v";
    }
    return "?";
}

std::string_view recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none:
            return "none";
        case Recompute::selective:
            return "selective";
        case Recompute::full:
            return "full";
    }
    return "?";
}

Recompute parse_recompute(std::string_view name) {
    if (name == "none") return Recompute::none;
    if (name == "selective") return Recompute::selective;
    if (name == "full") return Recompute::full;
    fail("--recompute must be none, selective or full, got '{}'", name);
}

CpKind parse_cp_kind(std::string_view value) {
    if (value == "ring") return CpKind::ring;
    if (value == "ulysses") return CpKind::ulysses;
    if (value == "hybrid") return CpKind::hybrid;
    fail("--cp-kind must be ring, ulysses or hybrid, got '{}'", value);
}

std::string_view cp_kind_name(CpKind kind) {
    return kind == CpKind::ring ? "ring" : kind == CpKind::ulysses ? "ulysses" : "hybrid";
}

namespace {

void check_positive(const char* name, int v) {
    WEFT_CHECK(v >= 1, "--{} must be at least 1, got {}", name, v);
}

}  // namespace

void MeshSizes::resolve(int world_size) {
    check_positive("tp", tp), check_positive("pp", pp), check_positive("cp", cp);
    check_positive("ep", ep);
    // ep is not a factor: it folds over dp.
    int others = tp * pp * cp;
    if (dp == 0) {
        WEFT_CHECK(world_size % others == 0,
                   "world size {} is not divisible by tp*pp*cp = {}*{}*{} = {}", world_size, tp, pp,
                   cp, others);
        dp = world_size / others;
    }
    check_positive("dp", dp);
    WEFT_CHECK(dp * others == world_size,
               "layout dp*tp*pp*cp = {}*{}*{}*{} = {} does not match the world size {}", dp, tp, pp,
               cp, dp * others, world_size);
    WEFT_CHECK(cp > 1 || dp % ep == 0,
               "--ep {} does not divide the data-parallel size dp={}: experts are split over ep "
               "consecutive dp ranks (MoE parallel folding), expected ep among the divisors of {}",
               ep, dp, dp);
    WEFT_CHECK((cp * dp) % ep == 0,
               "--ep {} does not divide cp x dp = {} x {} = {}: with context parallelism experts "
               "are split over ep consecutive ranks of the cp x dp group (MoE parallel folding), "
               "expected ep among the divisors of {}",
               ep, cp, dp, cp * dp, cp * dp);
}

std::string MeshSizes::describe() const {
    return fmt::format("dp={} tp={} pp={} cp={} ep={}", dp, tp, pp, cp, ep);
}

void Layout::resolve(int world_size) {
    // The sizes first, as comm::Mesh checks them before the options are looked at: a layout that
    // does not fit the world is named first.
    MeshSizes::resolve(world_size);
    check_positive("vpp", vpp);
    WEFT_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3, got {}", zero);
    WEFT_CHECK(!sequence_parallel || tp > 1,
               "--sequence-parallel needs --tp greater than 1: it splits the LayerNorm and "
               "residual regions over the tensor-parallel ranks");
    WEFT_CHECK(pp > 1 || vpp == 1, "--vpp {} needs --pp greater than 1", vpp);
    // Settings of an axis that is not there: like --sequence-parallel at tp 1, each says the
    // user meant another layout.
    WEFT_CHECK(pp > 1 || pp_schedule == ScheduleKind::one_f_one_b,
               "--pp-schedule {} needs --pp greater than 1: it orders the pipeline's micro-batches",
               format_schedule_kind(pp_schedule));
    WEFT_CHECK(cp > 1 || cp_kind == CpKind::ring,
               "--cp-kind {} needs --cp greater than 1: it is how context parallelism splits "
               "attention",
               cp_kind_name(cp_kind));
    WEFT_CHECK(cp > 1 || !ring_bidirectional,
               "--ring-bidirectional needs --cp greater than 1: it is a kind of ring attention "
               "over the context-parallel ranks");
    WEFT_CHECK(cp_kind == CpKind::hybrid || cp_ulysses == 0,
               "--cp-ulysses {} needs --cp-kind hybrid (got {})", cp_ulysses,
               cp_kind_name(cp_kind));
    WEFT_CHECK(!ring_bidirectional || cp_kind == CpKind::ring,
               "--ring-bidirectional is a kind of ring (TokenRing): it needs --cp-kind ring, got "
               "--cp-kind {} (ulysses and hybrid have no bidirectional form)",
               cp_kind_name(cp_kind));
    WEFT_CHECK(cp_kind != CpKind::hybrid || (cp_ulysses >= 1 && cp % cp_ulysses == 0),
               "--cp-kind hybrid runs Ulysses in groups of --cp-ulysses ranks and the ring across "
               "them: --cp-ulysses must divide --cp {}, got {}",
               cp, cp_ulysses);
    // ZB-V is two chunks a rank in a V by definition: --vpp may be left out.
    if (pp_schedule == ScheduleKind::zb_v && vpp == 1) vpp = 2;
    WEFT_CHECK(pp_schedule != ScheduleKind::zb_v || vpp == 2,
               "schedule zb-v runs two chunks per rank in a V, expected vpp=2 (or no --vpp), got "
               "vpp={}",
               vpp);
    WEFT_CHECK(
        pp_schedule == ScheduleKind::interleaved || pp_schedule == ScheduleKind::zb_v || vpp == 1,
        "schedule {} has one chunk per rank, expected vpp=1, got vpp={} (use interleaved)",
        format_schedule_kind(pp_schedule), vpp);
    WEFT_CHECK(!splits_backward(pp_schedule) || recompute != Recompute::full,
               "--pp-schedule {} with --recompute full: a zero-bubble schedule runs a layer's "
               "weight gradients (W) after the backward of the layers below it, which "
               "recomputation overwrites; use --recompute none (or another schedule)",
               format_schedule_kind(pp_schedule));
    WEFT_CHECK(pp == 1 || zero <= 1,
               "--zero {} with --pp {}: ZeRO stages 2 and 3 reduce (and gather) per micro-batch, "
               "which a pipeline's interleaved backward defeats; use --zero 0 or 1 with "
               "pipeline parallelism (as DeepSpeed and Megatron-LM do)",
               zero, pp);
}

std::string Layout::describe() const {
    std::string pipeline;
    if (pp > 1)
        pipeline = fmt::format(" {}{}", format_schedule_kind(pp_schedule),
                               vpp > 1 ? fmt::format(" vpp={}", vpp) : "");
    const std::string_view again = recompute == Recompute::full        ? " recompute"
                                   : recompute == Recompute::selective ? " recompute=selective"
                                                                       : "";
    const std::string context =
        cp == 1                     ? ""
        : cp_kind == CpKind::hybrid ? fmt::format(" hybrid ulysses={}", cp_ulysses)
        : ring_bidirectional && cp_kind == CpKind::ring ? std::string(" ring bidirectional")
                                                        : fmt::format(" {}", cp_kind_name(cp_kind));
    return fmt::format("{} zero={}{}{}{}{}", MeshSizes::describe(), zero,
                       sequence_parallel ? " sp" : "", pipeline, again, context);
}

}  // namespace weft
