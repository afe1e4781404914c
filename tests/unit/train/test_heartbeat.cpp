// The heartbeat file a rank writes for the supervisor: one JSON object, replaced whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/train/heartbeat.hpp"

namespace fs = std::filesystem;

TEST(Heartbeat, WritesTheDocumentedFields) {
    const fs::path dir =
        fs::temp_directory_path() / ("weft_heartbeat_" + std::to_string(getpid())) / "heartbeat";
    fs::remove_all(dir.parent_path());
    setenv("WEFT_ATTEMPT", "2", 1);
    weft::train::Heartbeat hb(dir, 1, 4);  // creates the directory
    hb.beat(weft::train::Phase::step, 7);
    hb.beat(weft::train::Phase::nonfinite, 8, "loss \"nan\"\n");
    unsetenv("WEFT_ATTEMPT");
    const auto j = nlohmann::json::parse(std::ifstream(dir / "rank_1.json"));
    EXPECT_EQ(j["rank"], 1);
    EXPECT_EQ(j["world_size"], 4);
    EXPECT_EQ(j["step"], 8);
    EXPECT_EQ(j["phase"], "nonfinite");
    EXPECT_EQ(j["detail"], "loss \"nan\"\n");
    EXPECT_EQ(j["pid"], getpid());
    EXPECT_EQ(j["attempt"], 2);
    EXPECT_GT(j["time"].get<double>(), 1.6e9);
    int files = 0;  // the temporary is renamed, not left behind
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
    EXPECT_EQ(files, 1);
    fs::remove_all(dir.parent_path());
}
