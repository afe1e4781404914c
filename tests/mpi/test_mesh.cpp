// Mesh coordinates and sub-communicator membership on every rank, for every way of laying out
// the world over the five axes, plus the named layouts of a 4-rank world.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"

using namespace weft::comm;

namespace {

using Degrees = std::array<int, kMeshAxes>;  // tp, cp, ep, dp, pp

weft::Layout layout_of(const Degrees& d) {
    weft::Layout l;
    l.tp = d[0], l.cp = d[1], l.ep = d[2], l.dp = d[3], l.pp = d[4];
    return l;
}

// Every assignment of degrees to the five axes whose product is n, ep (not a factor: it folds
// over cp x dp) then set to each divisor of cp x dp.
void factorizations(int n, int axis, Degrees& d, std::vector<Degrees>& out) {
    if (axis == kMeshAxes) {
        if (n != 1) return;
        for (int ep = 1; ep <= d[1] * d[3]; ++ep) {
            if ((d[1] * d[3]) % ep != 0) continue;
            Degrees folded = d;
            folded[2] = ep;
            out.push_back(folded);
        }
        return;
    }
    if (axis == 2) {  // ep
        factorizations(n, axis + 1, d, out);
        return;
    }
    for (int k = 1; k <= n; ++k) {
        if (n % k != 0) continue;
        d[axis] = k;
        factorizations(n / k, axis + 1, d, out);
    }
}

// A rank's index in the cp x dp group: cp + cp_size * dp, what ep folds over.
int data_index(const Mesh& mesh, const Degrees& c) {
    return c[1] + mesh.size(Axis::cp) * c[3];
}

// Coordinates (tp, cp, ep, dp, pp) of world rank r: ep is the cp x dp index mod ep.
Degrees coords_of(const Mesh& mesh, int r) {
    Degrees c{};
    for (int a : {0, 1, 3, 4}) {
        c[a] = r % mesh.size(Axis(a));
        r /= mesh.size(Axis(a));
    }
    c[2] = data_index(mesh, c) % mesh.size(Axis::ep);
    return c;
}

// World ranks that share every coordinate with `me` except those on the listed axes, in order.
// ep is not a coordinate of its own: leaving ep free alone frees cp and dp within my block of
// ep consecutive cp x dp ranks.
std::vector<int> expected_members(const Mesh& mesh, std::initializer_list<Axis> free_axes) {
    auto is_free = [&](Axis a) {
        return std::find(free_axes.begin(), free_axes.end(), a) != free_axes.end();
    };
    const int ep = mesh.size(Axis::ep);
    const Degrees me = coords_of(mesh, mesh.world_rank());
    std::vector<int> out;
    for (int r = 0; r < mesh.world_size(); ++r) {
        const Degrees c = coords_of(mesh, r);
        bool same = true;
        for (int a : {0, 4})
            if (!is_free(Axis(a)) && c[a] != me[a]) same = false;
        if (is_free(Axis::ep)) {
            if (data_index(mesh, c) / ep != data_index(mesh, me) / ep) same = false;
        } else {
            for (int a : {1, 3})
                if (!is_free(Axis(a)) && c[a] != me[a]) same = false;
        }
        if (same) out.push_back(r);
    }
    return out;
}

// The expert-data-parallel group: the cp x dp ranks with this rank's ep rank.
std::vector<int> expected_edp_members(const Mesh& mesh) {
    const Degrees me = coords_of(mesh, mesh.world_rank());
    std::vector<int> out;
    for (int r : expected_members(mesh, {Axis::cp, Axis::dp}))
        if (coords_of(mesh, r)[2] == me[2]) out.push_back(r);
    return out;
}

// The members as the group's own communicator sees them: every rank contributes its world rank.
std::vector<int> gathered_members(Group& g, int world_rank) {
    std::vector<int32_t> in = {world_rank}, out(g.size());
    all_gather(g, std::span<const int32_t>(in), std::span(out));
    return {out.begin(), out.end()};
}

void check_mesh(Mesh& mesh) {
    const auto& c = mesh.coords();
    const weft::MeshSizes& l = mesh.sizes();
    EXPECT_EQ(mesh.world_rank(), c[0] + l.tp * (c[1] + l.cp * (c[3] + l.dp * c[4])))
        << l.describe();
    EXPECT_EQ(c[2], (c[1] + l.cp * c[3]) % l.ep) << l.describe();
    EXPECT_EQ(mesh.world_rank_of(c), mesh.world_rank());
    for (int a = 0; a < kMeshAxes; ++a) {
        Group& g = mesh.group(Axis(a));
        EXPECT_EQ(g.name(), axis_name(Axis(a)));
        EXPECT_EQ(g.size(), mesh.size(Axis(a))) << l.describe() << " axis " << g.name();
        EXPECT_EQ(g.rank(), c[a]) << l.describe() << " axis " << g.name();
        std::vector<int> want = expected_members(mesh, {Axis(a)});
        EXPECT_EQ(std::vector<int>(g.members().begin(), g.members().end()), want)
            << l.describe() << " axis " << g.name();
        EXPECT_EQ(gathered_members(g, mesh.world_rank()), want)
            << l.describe() << " axis " << g.name();
    }
    Group& edp = mesh.expert_dp();
    EXPECT_EQ(edp.name(), "edp");
    EXPECT_EQ(edp.size(), l.cp * l.dp / l.ep) << l.describe();
    EXPECT_EQ(edp.rank(), (c[1] + l.cp * c[3]) / l.ep) << l.describe();
    EXPECT_EQ(gathered_members(edp, mesh.world_rank()), expected_edp_members(mesh)) << l.describe();
    Group& world = mesh.group(Axis::world);
    EXPECT_EQ(world.size(), mesh.world_size());
    EXPECT_EQ(world.rank(), mesh.world_rank());
    // A combined group for reducing gradients over data and context parallel ranks together.
    Group& cpdp = mesh.add_group({Axis::dp, Axis::cp});
    EXPECT_EQ(cpdp.name(), "cp*dp");
    EXPECT_EQ(&mesh.add_group({Axis::cp, Axis::dp}), &cpdp);
    std::vector<int> want = expected_members(mesh, {Axis::cp, Axis::dp});
    EXPECT_EQ(gathered_members(cpdp, mesh.world_rank()), want) << l.describe();
    EXPECT_EQ(cpdp.rank(),
              int(std::find(want.begin(), want.end(), mesh.world_rank()) - want.begin()));
}

}  // namespace

TEST(Mesh, EveryFactorizationOfTheWorld) {
    std::vector<Degrees> all;
    Degrees d{};
    factorizations(world_size(), 0, d, all);
    for (const Degrees& degrees : all) {
        Mesh mesh(layout_of(degrees));
        check_mesh(mesh);
    }
}

TEST(Mesh, NamedLayoutsOfFourRanks) {
    if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    const int r = world_rank();
    {
        Mesh mesh(layout_of({2, 1, 1, 2, 1}));  // tp2 x dp2
        EXPECT_EQ(mesh.rank(Axis::tp), r % 2);
        EXPECT_EQ(mesh.rank(Axis::dp), r / 2);
        std::vector<int> tp = {r - r % 2, r - r % 2 + 1}, dp = {r % 2, r % 2 + 2};
        EXPECT_EQ(std::vector<int>(mesh.group(Axis::tp).members().begin(),
                                   mesh.group(Axis::tp).members().end()),
                  tp);
        EXPECT_EQ(gathered_members(mesh.group(Axis::dp), r), dp);
        EXPECT_EQ(mesh.describe_rank(3), "tp 1, dp 1");
    }
    {
        weft::Layout dp4;  // dp derived from the world size
        Mesh mesh(dp4);
        EXPECT_EQ(mesh.sizes().dp, 4);
        EXPECT_EQ(mesh.rank(Axis::dp), r);
        EXPECT_EQ(gathered_members(mesh.group(Axis::dp), r), (std::vector<int>{0, 1, 2, 3}));
        EXPECT_EQ(mesh.group(Axis::tp).size(), 1);
    }
    {
        Mesh mesh(layout_of({1, 1, 1, 2, 2}));  // pp2 x dp2: stages are the slow axis
        EXPECT_EQ(mesh.rank(Axis::pp), r / 2);
        EXPECT_EQ(mesh.rank(Axis::dp), r % 2);
        EXPECT_EQ(gathered_members(mesh.group(Axis::pp), r), (std::vector<int>{r % 2, r % 2 + 2}));
        EXPECT_EQ(mesh.world_rank_of({0, 0, 0, 1, 1}), 3);
    }
}

TEST(Mesh, EpFoldsOverDpOfFourRanks) {
    if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    const int r = world_rank();
    weft::Layout l;  // mpirun -np 4 --ep 2: dp 4 for attention, ep 2 x edp 2 for experts
    l.ep = 2;
    Mesh mesh(l);
    EXPECT_EQ(mesh.sizes().dp, 4);
    EXPECT_EQ(mesh.rank(Axis::dp), r);
    EXPECT_EQ(gathered_members(mesh.group(Axis::dp), r), (std::vector<int>{0, 1, 2, 3}));
    const int first = r - r % 2;
    EXPECT_EQ(gathered_members(mesh.group(Axis::ep), r), (std::vector<int>{first, first + 1}));
    EXPECT_EQ(gathered_members(mesh.expert_dp(), r), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.describe_rank(3), "dp 3");
    EXPECT_THROW(mesh.add_group({Axis::ep, Axis::tp}), weft::Error);
}

TEST(Mesh, LayoutThatDoesNotMatchTheWorldIsRejected) {
    const int n = world_size();
    weft::Layout wrong;
    wrong.dp = n + 1;
    try {
        Mesh mesh(wrong);
        FAIL() << "expected weft::Error";
    } catch (const weft::Error& e) {
        std::string want = fmt::format(
            "cannot lay out {0} MPI ranks (mpirun -np {0}): layout dp*tp*pp*cp = {1}*1*1*1 "
            "= {1} does not match the world size {0}",
            n, n + 1);
        EXPECT_EQ(std::string(e.what()), want);
    }
    weft::Layout indivisible;
    indivisible.tp = 3;
    if (n % 3 != 0) {
        EXPECT_THROW(
            {
                try {
                    Mesh mesh(indivisible);
                } catch (const weft::Error& e) {
                    EXPECT_NE(std::string(e.what()).find(fmt::format(
                                  "world size {} is not divisible by tp*pp*cp = 3*1*1 = 3", n)),
                              std::string::npos)
                        << e.what();
                    throw;
                }
            },
            weft::Error);
    }
}

TEST(Mesh, BadArgumentsNameTheValue) {
    Mesh mesh(weft::Layout{});
    EXPECT_THROW(mesh.world_rank_of({0, 0, 0, world_size(), 0}), weft::Error);
    EXPECT_THROW(mesh.add_group({Axis::dp, Axis::dp}), weft::Error);
    EXPECT_THROW(mesh.add_group({Axis::world}), weft::Error);
    EXPECT_THROW(mesh.set_timeout(0), weft::Error);
    EXPECT_EQ(axis_name(Axis::tp), "tp");
    EXPECT_EQ(axis_name(Axis::world), "world");
}
