#include <gtest/gtest.h>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/checkpoint_dir.hpp"

namespace weft::ckpt {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// A checkpoint as the trainer writes it: the step dir whole, then latest.
void save_step(const fs::path& run, int64_t step, bool commit = true) {
    write_dir_atomic(checkpoint_path(run, step), [&](const fs::path& dir) {
        write_file_atomic(dir / "model.safetensors", std::to_string(step));
    });
    if (commit) commit_latest(run, step);
}

TEST(CheckpointDir, PathAndStepNames) {
    EXPECT_EQ(checkpoint_path("run", 123), fs::path("run/checkpoints/step_000123"));
    EXPECT_EQ(checkpoint_path("run", 1234567), fs::path("run/checkpoints/step_1234567"));
    std::string e = error_of([] { checkpoint_path("run", -1); });
    EXPECT_NE(e.find("step -1"), std::string::npos) << e;
    EXPECT_EQ(parse_step_name("step_000123"), 123);
    EXPECT_EQ(parse_step_name("step_0"), 0);
    EXPECT_FALSE(parse_step_name("step_"));
    EXPECT_FALSE(parse_step_name("step_12a"));
    EXPECT_FALSE(parse_step_name("step_-1"));
    EXPECT_FALSE(parse_step_name("latest"));
    EXPECT_FALSE(parse_step_name("step_99999999999999999999"));  // overflows int64
}

TEST(CheckpointDir, LatestPointsToNewest) {
    TempDir run;
    EXPECT_FALSE(find_latest(run.path()));  // no checkpoints yet
    save_step(run.path(), 10);
    EXPECT_EQ(find_latest(run.path()), checkpoint_path(run.path(), 10));
    save_step(run.path(), 20);
    EXPECT_EQ(find_latest(run.path()), checkpoint_path(run.path(), 20));
    EXPECT_EQ(test::read_bytes(run / "checkpoints" / "latest"), "step_000020\n");
    // A complete dir that was never committed is not taken as the latest.
    save_step(run.path(), 30, /*commit=*/false);
    EXPECT_EQ(find_latest(run.path()), checkpoint_path(run.path(), 20));
    std::string e = error_of([&] { commit_latest(run.path(), 40); });
    EXPECT_NE(e.find("step_000040 does not exist"), std::string::npos) << e;
}

TEST(CheckpointDir, LatestNamingMissingDirIsAnError) {
    TempDir run;
    save_step(run.path(), 5);
    fs::remove_all(checkpoint_path(run.path(), 5));
    std::string e = error_of([&] { find_latest(run.path()); });
    EXPECT_NE(e.find("step_000005, which does not exist"), std::string::npos) << e;
    EXPECT_NE(e.find((run / "checkpoints" / "latest").string()), std::string::npos) << e;

    write_file_atomic(run / "checkpoints" / "latest", "../../etc\n");
    e = error_of([&] { find_latest(run.path()); });
    EXPECT_NE(e.find("holds '../../etc', expected a checkpoint name"), std::string::npos) << e;
}

TEST(CheckpointDir, RemoveStaleTemporaries) {
    TempDir run;
    save_step(run.path(), 1);
    const fs::path ck = run / "checkpoints";
    fs::create_directories(ck / ".tmp-step_000002-4242" / "sub");
    write_file_atomic(ck / ".tmp-step_000002-4242" / "sub" / "x", "partial");
    test::write_bytes(ck / ".tmp-latest-4242-0", "step_000002");
    test::write_bytes(run / ".tmp-metrics.jsonl-4242-3", "partial");
    remove_stale_temporaries(run.path());
    EXPECT_TRUE(test::temporaries_in(ck).empty());
    EXPECT_TRUE(test::temporaries_in(run.path()).empty());
    EXPECT_TRUE(fs::is_directory(checkpoint_path(run.path(), 1)));
    EXPECT_EQ(find_latest(run.path()), checkpoint_path(run.path(), 1));
    TempDir empty;
    remove_stale_temporaries(empty.path());  // no checkpoints/ yet: nothing to do
}

TEST(CheckpointDir, KeepLast) {
    TempDir run;
    for (int64_t s : {1, 2, 3}) save_step(run.path(), s);
    for (int64_t s : {4, 5}) save_step(run.path(), s, /*commit=*/false);  // latest stays at 3
    keep_last(run.path(), 1);
    // Never fewer than two (5, 4), so that a damaged newest one leaves one to resume from; and 3
    // because latest names it.
    for (int64_t s : {1, 2}) EXPECT_FALSE(fs::exists(checkpoint_path(run.path(), s))) << s;
    for (int64_t s : {3, 4, 5}) EXPECT_TRUE(fs::exists(checkpoint_path(run.path(), s))) << s;

    TempDir run2;
    for (int64_t s : {100, 200, 300, 1000}) save_step(run2.path(), s);
    keep_last(run2.path(), 2);
    for (int64_t s : {100, 200}) EXPECT_FALSE(fs::exists(checkpoint_path(run2.path(), s))) << s;
    for (int64_t s : {300, 1000}) EXPECT_TRUE(fs::exists(checkpoint_path(run2.path(), s))) << s;
    EXPECT_TRUE(fs::exists(run2 / "checkpoints" / "latest"));
    std::string e = error_of([&] { keep_last(run2.path(), 0); });
    EXPECT_NE(e.find("n = 0, expected >= 1"), std::string::npos) << e;
}

TEST(CheckpointDir, ResolveCheckpoint) {
    TempDir run;
    save_step(run.path(), 7);
    EXPECT_EQ(resolve_checkpoint(run.path()), checkpoint_path(run.path(), 7));
    EXPECT_EQ(resolve_checkpoint(checkpoint_path(run.path(), 7)), checkpoint_path(run.path(), 7));

    TempDir hf;  // a model directory holding weights, e.g. an exported or pretrained model
    test::write_bytes(hf / "model.safetensors", "");
    EXPECT_EQ(resolve_checkpoint(hf.path()), hf.path());

    TempDir other;
    std::string e = error_of([&] { resolve_checkpoint(other.path()); });
    EXPECT_NE(e.find("is neither a checkpoint directory"), std::string::npos) << e;
    EXPECT_NE(e.find(other.path().string()), std::string::npos) << e;
    e = error_of([&] { resolve_checkpoint(other / "missing"); });
    EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
    fs::create_directories(other / "checkpoints");
    e = error_of([&] { resolve_checkpoint(other.path()); });
    EXPECT_NE(e.find("has no committed checkpoint"), std::string::npos) << e;
}

}  // namespace
}  // namespace weft::ckpt
