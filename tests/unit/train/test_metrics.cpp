// metrics.jsonl across restarts: the lines of steps a resumed run redoes are dropped first, so
// each step is in the file once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "weft/train/metrics.hpp"

namespace fs = std::filesystem;
using weft::train::drop_redone_metrics;

namespace {

std::string read(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(Metrics, ARestartDropsTheStepsItRedoes) {
    const fs::path dir = fs::temp_directory_path() / ("weft_metrics_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path file = dir / "metrics.jsonl";
    const std::string kept =
        "{\"event\":\"start\",\"step\":0}\n{\"loss\":3,\"step\":1}\n{\"loss\":2,\"step\":2}\n"
        "{\"step\":2,\"val_loss\":2.5}\n";
    // Step 3's line came before the commit of step 2's asynchronous checkpoint; step 3's
    // checkpoint, the summary and the torn last line all belong to what the restart redoes.
    std::ofstream(file) << kept << "{\"loss\":1,\"step\":3}\n"
                        << "{\"event\":\"checkpoint\",\"step\":2}\n"
                        << "{\"event\":\"checkpoint\",\"step\":3}\n"
                        << "{\"event\":\"summary\",\"steps\":3}\n{\"loss\":0.5,\"st";
    EXPECT_EQ(drop_redone_metrics(file, 2), 4);
    EXPECT_EQ(read(file), kept + "{\"event\":\"checkpoint\",\"step\":2}\n");
    EXPECT_EQ(drop_redone_metrics(file, 2), 0);  // nothing left to drop
    {
        weft::train::MetricsLog log(file, 2);
        log.write({{"step", 3}});
    }
    EXPECT_EQ(read(file), kept + "{\"event\":\"checkpoint\",\"step\":2}\n{\"step\":3}\n");
    // A start from scratch redoes everything, step 0's evaluation too.
    EXPECT_EQ(drop_redone_metrics(file, 0), 6);
    EXPECT_EQ(read(file), "");
    EXPECT_EQ(drop_redone_metrics(dir / "absent.jsonl", 3), 0);
    EXPECT_FALSE(fs::exists(dir / "absent.jsonl"));
    fs::remove_all(dir);
}
