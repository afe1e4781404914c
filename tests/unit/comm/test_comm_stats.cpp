// The parts of comm that need no MPI: stats export, names, the timeout setting.
#include <gtest/gtest.h>

#include <cstdlib>

#include "weft/comm/mesh.hpp"
#include "weft/comm/stats.hpp"
#include "weft/core/error.hpp"

using namespace weft::comm;

TEST(CommStats, JsonHasEveryCalledOpAndATotal) {
    GroupStats dp;
    dp.name = "dp";
    dp.size = 4;
    dp[Op::all_reduce] = {3, 300, 450.0, 0.5, 0.0};
    dp[Op::all_gather] = {1, 64, 48.0, 0.25, 0.125};
    CommStats stats{{dp}};
    nlohmann::json j = stats.to_json();
    EXPECT_EQ(j["dp"]["size"], 4);
    EXPECT_EQ(j["dp"]["all_reduce"]["bytes"], 300);
    EXPECT_EQ(j["dp"]["all_gather"]["wait_seconds"], 0.125);
    EXPECT_EQ(j["dp"]["total"]["calls"], 4);
    EXPECT_EQ(j["dp"]["total"]["bus_bytes"], 498.0);
    EXPECT_FALSE(j["dp"].contains("broadcast"));
    EXPECT_EQ(stats.find("dp")->total().bytes, 364u);
    EXPECT_EQ(stats.find("tp"), nullptr);
}

TEST(CommStats, TableHasARowPerCalledOp) {
    GroupStats tp;
    tp.name = "tp";
    tp.size = 2;
    tp[Op::all_reduce] = {1, 3 << 20, 3 << 20, 0.001, 0};
    std::string table = CommStats{{tp}}.table();
    EXPECT_NE(table.find("all_reduce"), std::string::npos) << table;
    EXPECT_NE(table.find("3.00 MiB"), std::string::npos) << table;
    EXPECT_EQ(table.find("all_gather"), std::string::npos) << table;
}

TEST(CommNames, AxesAndOps) {
    EXPECT_EQ(axis_name(Axis::cp), "cp");
    EXPECT_EQ(axis_name(Axis::pp), "pp");
    EXPECT_EQ(op_name(Op::reduce_scatter), "reduce_scatter");
}

TEST(CommTimeout, FromTheEnvironment) {
    unsetenv("WEFT_COMM_TIMEOUT");
    EXPECT_EQ(default_comm_timeout(), 300.0);
    setenv("WEFT_COMM_TIMEOUT", "2.5", 1);
    EXPECT_EQ(default_comm_timeout(), 2.5);
    setenv("WEFT_COMM_TIMEOUT", "soon", 1);
    try {
        default_comm_timeout();
        FAIL();
    } catch (const weft::Error& e) {
        EXPECT_STREQ(e.what(), "WEFT_COMM_TIMEOUT='soon' is not a positive number of seconds");
    }
    unsetenv("WEFT_COMM_TIMEOUT");
}
