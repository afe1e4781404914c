// Every collective's result checked on every rank, on every axis of several layouts (axes of
// size 1 take the no-MPI path), blocking and non-blocking. Inputs are exact in float so results
// compare with ==.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"

using namespace weft::comm;

namespace {

std::vector<weft::Layout> layouts() {
    std::vector<weft::Layout> out(1);  // dp = world
    auto add = [&](int tp, int cp, int ep, int dp, int pp) {
        weft::Layout l;
        l.tp = tp, l.cp = cp, l.ep = ep, l.dp = dp, l.pp = pp;
        if (l.world_size() == world_size()) out.push_back(l);
    };
    add(2, 1, 1, 1, 1);
    add(2, 1, 1, 2, 1);
    add(1, 1, 1, 2, 2);
    add(1, 1, 2, 2, 1);  // ep folds over dp: ep 2 is a group of the dp ranks
    add(1, 2, 2, 2, 1);
    return out;
}

// Runs check(group, label) for every axis (and the world) of every layout.
template <class Check>
void on_every_group(Check&& check) {
    for (const weft::Layout& l : layouts()) {
        Mesh mesh(l);
        for (int a = 0; a <= kMeshAxes; ++a) {
            Group& g = mesh.group(Axis(a));
            check(g, l.describe() + " on " + std::string(g.name()));
        }
    }
}

}  // namespace

TEST(Collectives, AllReduce) {
    on_every_group([](Group& g, const std::string& where) {
        const int me = world_rank(), n = g.size();
        const int sum_members = std::accumulate(g.members().begin(), g.members().end(), 0);
        std::vector<float> x(37);
        for (size_t i = 0; i < x.size(); ++i) x[i] = me + 0.25f * i;
        all_reduce(g, std::span(x));
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], sum_members + n * 0.25f * i) << where;

        std::vector<int32_t> m = {me, -me};
        all_reduce(g, std::span(m), ReduceOp::max);
        EXPECT_EQ(m[0], g.members().back()) << where;
        EXPECT_EQ(m[1], -g.members().front()) << where;

        std::vector<double> d = {double(me)};
        Request r = all_reduce_async(g, std::span(d), ReduceOp::min);
        while (!r.test()) {
        }
        EXPECT_EQ(d[0], g.members().front()) << where;

        std::vector<int64_t> big = {int64_t(1) << 40};
        Request r2 = all_reduce_async(g, std::span(big));
        r2.wait();
        EXPECT_TRUE(r2.done());
        EXPECT_EQ(big[0], n * (int64_t(1) << 40)) << where;
    });
}

TEST(Collectives, ReduceScatter) {
    on_every_group([](Group& g, const std::string& where) {
        const int n = g.size(), block = 5;
        const int sum_members = std::accumulate(g.members().begin(), g.members().end(), 0);
        std::vector<float> in(n * block), out(block);
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < block; ++i) in[j * block + i] = world_rank() * 100 + j * 10 + i;
        reduce_scatter(g, std::span<const float>(in), std::span(out));
        for (int i = 0; i < block; ++i)
            ASSERT_EQ(out[i], sum_members * 100 + n * (g.rank() * 10 + i)) << where;

        std::vector<double> max_out(block, -1);
        std::vector<double> din(in.begin(), in.end());
        reduce_scatter_async(g, std::span<const double>(din), std::span(max_out), ReduceOp::max)
            .wait();
        for (int i = 0; i < block; ++i)
            ASSERT_EQ(max_out[i], g.members().back() * 100 + g.rank() * 10 + i) << where;
    });
}

TEST(Collectives, AllGather) {
    on_every_group([](Group& g, const std::string& where) {
        const int n = g.size(), block = 3;
        std::vector<int64_t> in(block), out(n * block);
        for (int i = 0; i < block; ++i) in[i] = world_rank() * 1000 + i;
        all_gather(g, std::span<const int64_t>(in), std::span(out));
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < block; ++i)
                ASSERT_EQ(out[j * block + i], g.members()[j] * 1000 + i) << where;

        // In place: this rank's shard already sits in its block of the full buffer (ZeRO).
        std::vector<float> full(n * block, -1.0f);
        for (int i = 0; i < block; ++i) full[g.rank() * block + i] = world_rank() + 0.5f * i;
        std::span<float> mine(full.data() + g.rank() * block, block);
        all_gather_async(g, std::span<const float>(mine), std::span(full)).wait();
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < block; ++i)
                ASSERT_EQ(full[j * block + i], g.members()[j] + 0.5f * i) << where;

        // Containers convert to the spans directly: exactly one overload fits each element type.
        std::vector<std::byte> b = {std::byte(world_rank())}, all(n);
        all_gather(g, b, all);
        for (int j = 0; j < n; ++j) ASSERT_EQ(int(all[j]), g.members()[j]) << where;
    });
}

TEST(Collectives, AllToAll) {
    on_every_group([](Group& g, const std::string& where) {
        const int n = g.size(), block = 4, me = world_rank();
        std::vector<float> in(n * block), out(n * block);
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < block; ++i) in[j * block + i] = me * 1000 + j * 10 + i;
        all_to_all(g, std::span<const float>(in), std::span(out));
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < block; ++i)
                ASSERT_EQ(out[j * block + i], g.members()[j] * 1000 + g.rank() * 10 + i) << where;
        std::fill(out.begin(), out.end(), 0.0f);
        all_to_all_async(g, std::span<const float>(in), std::span(out)).wait();
        EXPECT_EQ(out[0], g.members()[0] * 1000 + g.rank() * 10) << where;
    });
}

TEST(Collectives, AllToAllWithCounts) {
    on_every_group([](Group& g, const std::string& where) {
        const int n = g.size(), r = g.rank();
        auto count = [](int from, int to) { return (from + 2 * to) % 3 + 1; };  // 1..3 elements
        std::vector<int> sc(n), sd(n), rc(n), rd(n);
        for (int j = 0; j < n; ++j) sc[j] = count(r, j), rc[j] = count(j, r);
        std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), 0);
        std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), 0);
        std::vector<int32_t> in(sd.back() + sc.back()), out(rd.back() + rc.back(), -1);
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < sc[j]; ++i) in[sd[j] + i] = r * 1000 + j * 100 + i;
        for (bool async : {false, true}) {
            std::fill(out.begin(), out.end(), -1);
            if (async) {
                Request req = all_to_all_v_async(g, std::span<const int32_t>(in), sc, sd,
                                                 std::span(out), rc, rd);
                // The counts are copied: MPI reads them until the operation is done.
                std::fill(sc.begin(), sc.end(), -7);
                req.wait();
                for (int j = 0; j < n; ++j) sc[j] = count(r, j);
            } else {
                all_to_all_v(g, std::span<const int32_t>(in), sc, sd, std::span(out), rc, rd);
            }
            for (int j = 0; j < n; ++j)
                for (int i = 0; i < rc[j]; ++i)
                    ASSERT_EQ(out[rd[j] + i], j * 1000 + r * 100 + i)
                        << where << " async " << async;
        }
    });
}

TEST(Collectives, Broadcast) {
    on_every_group([](Group& g, const std::string& where) {
        const int root = g.size() - 1;
        std::vector<double> x(6);
        for (size_t i = 0; i < x.size(); ++i) x[i] = world_rank() * 10.0 + i;
        broadcast(g, std::span(x), root);
        for (size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(x[i], g.members()[root] * 10.0 + i) << where;
        std::vector<std::byte> b = {std::byte(world_rank())};
        broadcast_async(g, std::span(b), 0).wait();
        EXPECT_EQ(int(b[0]), g.members()[0]) << where;
    });
}

TEST(Collectives, SendRecvAroundARing) {
    on_every_group([](Group& g, const std::string& where) {
        const int n = g.size(), r = g.rank();
        if (n % 2 == 1) return;  // the layouts have groups of 1, 2 and 4
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        std::vector<float> out(8, float(world_rank())), in(8, -1.0f);
        Request rx = recv_async(g, std::span(in), prev, 7);
        send(g, std::span<const float>(out), next, 7);
        rx.wait();
        for (float v : in) ASSERT_EQ(v, float(g.members()[prev])) << where;
        // Blocking both ways, ordered by parity so that an even ring cannot deadlock.
        std::vector<int64_t> token = {world_rank()}, got = {-1};
        if (r % 2 == 0) {
            send(g, std::span<const int64_t>(token), next);
            recv(g, std::span(got), prev);
        } else {
            recv(g, std::span(got), prev);
            send(g, std::span<const int64_t>(token), next);
        }
        EXPECT_EQ(got[0], g.members()[prev]) << where;
    });
}

TEST(Collectives, BarrierAndBadArguments) {
    Mesh mesh(weft::Layout{});
    Group& g = mesh.group(Axis::dp);
    barrier(g);
    barrier_async(g).wait();
    const int n = g.size();
    std::vector<float> in(n * 2 + 1), out(2);
    EXPECT_THROW(reduce_scatter(g, std::span<const float>(in), std::span(out)), weft::Error);
    EXPECT_THROW(all_gather(g, std::span<const float>(out), std::span(in)), weft::Error);
    EXPECT_THROW(broadcast(g, std::span(out), n), weft::Error);
    EXPECT_THROW(send(g, std::span<const float>(out), g.rank()), weft::Error);
    EXPECT_THROW(recv(g, std::span(out), (g.rank() + 1) % n, 40000), weft::Error);
    try {
        reduce_scatter(g, std::span<const float>(in), std::span(out));
    } catch (const weft::Error& e) {
        EXPECT_NE(std::string(e.what()).find(fmt::format(
                      "reduce_scatter on dp (group rank {} of {}): input has {} elements, "
                      "expected {} ranks x 2 output elements = {}",
                      g.rank(), n, in.size(), n, 2 * n)),
                  std::string::npos)
            << e.what();
    }
    barrier(g);
}
