#include "weft/core/layout.hpp"

#include <fmt/format.h>

#include "weft/core/error.hpp"

namespace weft {

void Layout::resolve(int world_size) {
    auto positive = [](const char* name, int v) {
        WEFT_CHECK(v >= 1, "--{} must be at least 1, got {}", name, v);
    };
    positive("tp", tp), positive("pp", pp), positive("cp", cp), positive("ep", ep);
    positive("vpp", vpp);
    WEFT_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3, got {}", zero);
    WEFT_CHECK(pp_schedule == "gpipe" || pp_schedule == "1f1b" || pp_schedule == "interleaved",
               "--pp-schedule must be gpipe, 1f1b or interleaved, got '{}'", pp_schedule);
    WEFT_CHECK(!sequence_parallel || tp > 1,
               "--sequence-parallel needs --tp greater than 1: it splits the LayerNorm and "
               "residual regions over the tensor-parallel ranks");
    int others = tp * pp * cp * ep;
    if (dp == 0) {
        WEFT_CHECK(world_size % others == 0,
                   "world size {} is not divisible by tp*pp*cp*ep = {}*{}*{}*{} = {}", world_size,
                   tp, pp, cp, ep, others);
        dp = world_size / others;
    }
    positive("dp", dp);
    WEFT_CHECK(dp * others == world_size,
               "layout dp*tp*pp*cp*ep = {}*{}*{}*{}*{} = {} does not match the world size {}", dp,
               tp, pp, cp, ep, dp * others, world_size);
}

std::string Layout::describe() const {
    std::string pipeline;
    if (pp > 1) pipeline = " " + pp_schedule + (vpp > 1 ? fmt::format(" vpp={}", vpp) : "");
    return fmt::format("dp={} tp={} pp={} cp={} ep={} zero={}{}{}{}", dp, tp, pp, cp, ep, zero,
                       sequence_parallel ? " sp" : "", pipeline, recompute ? " recompute" : "");
}

}  // namespace weft
