// The counters equal the analytic volumes of docs/comm.md, per group and operation, on every
// rank; groups of size 1 count calls with 0 bytes.
#include <gtest/gtest.h>

#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/mpi_env.hpp"

using namespace weft::comm;

namespace {

void expect_op(const GroupStats& g, Op op, uint64_t calls, uint64_t bytes, double bus) {
    const OpStats& s = g[op];
    EXPECT_EQ(s.calls, calls) << g.name << " " << op_name(op);
    EXPECT_EQ(s.bytes, bytes) << g.name << " " << op_name(op);
    EXPECT_DOUBLE_EQ(s.bus_bytes, bus) << g.name << " " << op_name(op);
    EXPECT_GE(s.seconds, 0.0);
    EXPECT_GE(s.wait_seconds, 0.0);
}

}  // namespace

TEST(Accounting, AnalyticVolumesOnTheDataParallelAxis) {
    Mesh mesh(weft::Layout{});  // dp = world
    Group& g = mesh.group(Axis::dp);
    const int n = g.size();
    const uint64_t N = n;

    // S = 7 floats = 28 B: 2(n-1)/n * 28 is not whole for n = 4 (42), for n = 3 it would be.
    std::vector<float> x(7, 1.0f);
    all_reduce(g, std::span(x));
    all_reduce_async(g, std::span(x), ReduceOp::max).wait();
    const double S = 28, ring = n > 1 ? 2.0 * (n - 1) * S / n : 0;
    expect_op(g.stats(), Op::all_reduce, 2, n > 1 ? 56 : 0, 2 * ring);

    std::vector<float> full(12 * n), shard(12);  // shard 48 B, full 48n B
    reduce_scatter(g, std::span<const float>(full), std::span(shard));
    all_gather(g, std::span<const float>(shard), std::span(full));
    all_gather_async(g, std::span<const float>(shard), std::span(full)).wait();
    const uint64_t F = n > 1 ? 48 * N : 0;
    expect_op(g.stats(), Op::reduce_scatter, 1, F, 48.0 * (n - 1));
    expect_op(g.stats(), Op::all_gather, 2, 2 * F, 2 * 48.0 * (n - 1));

    std::vector<double> a(3 * n), b(3 * n);  // 24n B, 24 B for each rank
    all_to_all(g, std::span<const double>(a), std::span(b));
    // all_to_all_v: 2 int32 to every rank, 1 to itself.
    std::vector<int> sc(n, 2), sd(n), rc(n, 2), rd(n);
    sc[g.rank()] = rc[g.rank()] = 1;
    for (int j = 1; j < n; ++j) sd[j] = sd[j - 1] + sc[j - 1], rd[j] = rd[j - 1] + rc[j - 1];
    std::vector<int32_t> vin(2 * n - 1), vout(2 * n - 1);
    all_to_all_v(g, std::span<const int32_t>(vin), sc, sd, std::span(vout), rc, rd);
    expect_op(g.stats(), Op::all_to_all, 2, n > 1 ? 24 * N + 4 * (2 * N - 1) : 0,
              24.0 * (n - 1) + 8.0 * (n - 1));

    std::vector<std::byte> blob(1000);
    broadcast(g, std::span(blob), 0);
    expect_op(g.stats(), Op::broadcast, 1, n > 1 ? 1000 : 0, 1000.0 * (n - 1) / n);

    if (n > 1) {
        std::vector<int64_t> msg(5);  // 40 B
        if (g.rank() == 0) send(g, std::span<const int64_t>(msg), 1);
        if (g.rank() == 1) recv(g, std::span(msg), 0);
        const GroupStats& s = g.stats();
        expect_op(s, Op::send, g.rank() == 0, g.rank() == 0 ? 40 : 0, g.rank() == 0 ? 40 : 0);
        expect_op(s, Op::recv, g.rank() == 1, g.rank() == 1 ? 40 : 0, 0);
    }

    // Only dp was used; the other groups saw nothing.
    CommStats stats = mesh.stats();
    EXPECT_EQ(stats.find("world")->total().calls, 0u);
    EXPECT_EQ(stats.find("tp")->total().calls, 0u);
    nlohmann::json j = stats.to_json();
    EXPECT_EQ(j["dp"]["size"], n);
    EXPECT_EQ(j["dp"]["all_reduce"]["calls"], 2);
    EXPECT_EQ(j["dp"]["reduce_scatter"]["bytes"], F);
    EXPECT_FALSE(j["tp"].contains("all_reduce"));
    EXPECT_NE(stats.table().find("all_gather"), std::string::npos);

    mesh.reset_stats();
    EXPECT_EQ(mesh.stats().find("dp")->total().calls, 0u);
}

TEST(Accounting, GroupsOfOneCountCallsButNoBytes) {
    Mesh mesh(weft::Layout{});
    Group& tp = mesh.group(Axis::tp);  // tp = 1
    std::vector<float> x(100, 2.0f), y(100);
    all_reduce(tp, std::span(x));
    all_gather(tp, std::span<const float>(x), std::span(y));
    all_reduce_async(tp, std::span(x)).wait();
    EXPECT_EQ(x[0], 2.0f);
    EXPECT_EQ(y[99], 2.0f);
    expect_op(tp.stats(), Op::all_reduce, 2, 0, 0);
    expect_op(tp.stats(), Op::all_gather, 1, 0, 0);
}

TEST(Accounting, AsyncWaitTimeIsCountedSeparately) {
    Mesh mesh(weft::Layout{});
    Group& g = mesh.group(Axis::world);
    std::vector<float> x(1 << 16, 1.0f);
    Request r = all_reduce_async(g, std::span(x));
    r.wait();
    all_reduce(g, std::span(x));
    const OpStats& s = g.stats()[Op::all_reduce];
    EXPECT_EQ(s.calls, 2u);
    if (g.size() > 1) {
        EXPECT_GT(s.seconds, 0.0);
    }
    EXPECT_EQ(x[0], float(g.size() * g.size()));
}
