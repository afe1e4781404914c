// Layout::resolve checks every value and combination once, with messages naming the flags;
// describe() is what runs and benchmarks print.
#include <gtest/gtest.h>

#include "weft/core/error.hpp"
#include "weft/core/layout.hpp"

using namespace weft;

namespace {

std::string error_of(Layout l, int world) {
    try {
        l.resolve(world);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Layout, DerivesDpFromTheWorld) {
    Layout l;
    l.tp = 2, l.pp = 2;
    l.resolve(8);
    EXPECT_EQ(l.dp, 2);
    EXPECT_EQ(l.world_size(), 8);
    EXPECT_EQ(l.describe(), "dp=2 tp=2 pp=2 cp=1 ep=1 zero=0 1f1b");
}

TEST(Layout, DescribeNamesTheOptions) {
    Layout l;
    l.pp = 2, l.vpp = 2, l.pp_schedule = ScheduleKind::interleaved, l.tp = 2;
    l.sequence_parallel = true, l.recompute = Recompute::full, l.zero = 1;
    l.resolve(4);
    EXPECT_EQ(l.describe(), "dp=1 tp=2 pp=2 cp=1 ep=1 zero=1 sp interleaved vpp=2 recompute");
}

TEST(Layout, ChecksValuesAndCombinations) {
    Layout l;
    l.zero = 4;
    EXPECT_EQ(error_of(l, 1), "--zero must be 0, 1, 2 or 3, got 4");
    l = {};
    l.sequence_parallel = true;
    EXPECT_NE(error_of(l, 1).find("--sequence-parallel needs --tp greater than 1"),
              std::string::npos);
    l = {};
    l.vpp = 2;
    EXPECT_EQ(error_of(l, 1), "--vpp 2 needs --pp greater than 1");
    l.pp = 2;
    EXPECT_EQ(error_of(l, 2),
              "schedule 1f1b has one chunk per rank, expected vpp=1, got vpp=2 (use interleaved)");
    l.pp_schedule = ScheduleKind::interleaved;
    EXPECT_EQ(error_of(l, 2), "");
    l.zero = 2;
    EXPECT_NE(error_of(l, 2).find("--zero 2 with --pp 2"), std::string::npos);
    // The world is checked first: a layout that does not fit it is named, whatever else is wrong.
    EXPECT_NE(error_of(l, 3).find("world size 3 is not divisible by tp*pp*cp"), std::string::npos);
}

TEST(Layout, EpFoldsOverDp) {
    // mpirun -np 4 --ep 2: dp 4 for attention, experts over ep 2 x edp 2; the world is not ep x.
    Layout l;
    l.ep = 2;
    l.resolve(4);
    EXPECT_EQ(l.dp, 4);
    EXPECT_EQ(l.world_size(), 4);
    l = {};
    l.ep = 4;
    l.tp = 2;
    EXPECT_EQ(error_of(l, 4),
              "--ep 4 does not divide the data-parallel size dp=2: experts are split over ep "
              "consecutive dp ranks (MoE parallel folding), expected ep among the divisors of 2");
    l = {};
    l.ep = 0;
    EXPECT_EQ(error_of(l, 1), "--ep must be at least 1, got 0");
}

// The sizes resolve alone, as comm::Mesh resolves them: an option never stops a mesh, and the
// sizes' errors are the layout's.
TEST(Layout, SizesResolveWithoutTheOptions) {
    Layout l;
    l.tp = 2, l.ep = 2, l.sequence_parallel = true, l.zero = 9;
    MeshSizes sizes = l;
    sizes.resolve(8);
    EXPECT_EQ(sizes.dp, 4);
    EXPECT_EQ(sizes.describe(), "dp=4 tp=2 pp=1 cp=1 ep=2");
    EXPECT_EQ(error_of(l, 8), "--zero must be 0, 1, 2 or 3, got 9");
    sizes = {};
    sizes.tp = 2;
    try {
        sizes.resolve(3);
        FAIL() << "expected weft::Error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), error_of(l, 3));
        EXPECT_EQ(std::string(e.what()), "world size 3 is not divisible by tp*pp*cp = 2*1*1 = 2");
    }
}

TEST(Layout, ParsesFlagValuesOnce) {
    for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                           ScheduleKind::interleaved, ScheduleKind::zb_h1, ScheduleKind::zb_v})
        EXPECT_EQ(parse_pp_schedule_flag(format_schedule_kind(k)), k);
    try {
        parse_pp_schedule_flag("zb-h2");
        FAIL() << "expected weft::Error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "--pp-schedule must be gpipe, 1f1b, interleaved, zb-h1 or zb-v, got 'zb-h2'");
    }
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        EXPECT_EQ(parse_recompute(recompute_name(r)), r);
    EXPECT_THROW(parse_recompute("some"), Error);
}

// Context parallelism's kinds: the hybrid's Ulysses groups must divide cp, and its group size
// goes with the hybrid only.
TEST(Layout, ChecksTheHybridContextParallelism) {
    for (CpKind k : {CpKind::ring, CpKind::ulysses, CpKind::hybrid})
        EXPECT_EQ(parse_cp_kind(cp_kind_name(k)), k);
    EXPECT_THROW(parse_cp_kind("spiral"), Error);
    Layout l;
    l.cp = 4, l.cp_kind = CpKind::hybrid, l.cp_ulysses = 3;
    EXPECT_EQ(error_of(l, 4),
              "--cp-kind hybrid runs Ulysses in groups of --cp-ulysses ranks and the ring across "
              "them: --cp-ulysses must divide --cp 4, got 3");
    l.cp_ulysses = 0;
    EXPECT_NE(error_of(l, 4).find("--cp-ulysses must divide --cp 4, got 0"), std::string::npos);
    l.cp_ulysses = 2;
    EXPECT_EQ(error_of(l, 8), "");
    l.resolve(8);
    EXPECT_EQ(l.describe(), "dp=2 tp=1 pp=1 cp=4 ep=1 zero=0 hybrid ulysses=2");
    l = {};
    l.cp = 2, l.cp_ulysses = 2;
    EXPECT_EQ(error_of(l, 2), "--cp-ulysses 2 needs --cp-kind hybrid (got ring)");
}
