// The offloaded state's files and their streaming: every element of every slice makes the round
// trip through the pool and the ring, groups cut across slices of sizes that are not multiples
// of a block; a failing callback leaves no transfer in flight; the files are weft's alone and
// gone afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/offload/streamed_state.hpp"

namespace weft::offload {
namespace {

namespace fs = std::filesystem;

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("weft-offload-test-" + std::to_string(getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

float value(int stream, int slice, int64_t i) {
    return float(stream * 1000003 + slice * 10007) + float(i) * 0.5f;
}

const std::vector<int64_t> kSlices = {5000, 1, 3000};  // 9 groups of at most 1024

TEST(StreamedState, EveryElementMakesTheRoundTrip) {
    TempDir dir;
    StateFiles files(dir.path, 0, {"a", "b"}, kSlices);
    StreamedState s(files, 1000);  // rounded up to a block, 1024
    EXPECT_EQ(s.group_floats(), 1024);
    const PassStats w = s.run(false, true, [](int slice, int64_t a, int64_t b, auto st) {
        for (int k = 0; k < 2; ++k)
            for (int64_t i = a; i < b; ++i) st[size_t(k)][i - a] = value(k, slice, i);
    });
    EXPECT_EQ(w.read_bytes, 0);
    EXPECT_EQ(w.written_bytes, 2 * 4 * (5120 + 1024 + 3072));  // each slice's blocks
    int64_t seen = 0;
    s.run(true, true, [&](int slice, int64_t a, int64_t b, auto st) {
        for (int k = 0; k < 2; ++k)
            for (int64_t i = a; i < b; ++i) {
                ASSERT_EQ(st[size_t(k)][i - a], value(k, slice, i)) << slice << " " << i;
                st[size_t(k)][i - a] += 1.0f;
            }
        seen += b - a;
    });
    EXPECT_EQ(seen, 8001);
    // Read back through the page cache, at an offset no block starts at.
    std::vector<float> got(17);
    files.read(1, 2, 1001, 17, got.data());
    for (int64_t i = 0; i < 17; ++i) EXPECT_EQ(got[size_t(i)], value(1, 2, 1001 + i) + 1.0f);
    files.write(0, 0, 4999, 1, got.data());
    s.run(true, false, [&](int slice, int64_t a, int64_t b, auto st) {
        if (slice == 0 && b == 5000) {
            EXPECT_EQ(st[0][4999 - a], got[0]);
        }
    });
}

TEST(StreamedState, AFailingUpdateLeavesNothingInFlight) {
    TempDir dir;
    StateFiles files(dir.path, 0, {"a"}, kSlices);
    StreamedState s(files, 1024);
    int calls = 0;
    EXPECT_THROW(s.run(true, true,
                       [&](int, int64_t, int64_t, auto) {
                           if (++calls == 3) throw std::runtime_error("update failed");
                       }),
                 std::runtime_error);
    // The ring and pool are whole again: a full pass works.
    int64_t seen = 0;
    s.run(true, true, [&](int, int64_t a, int64_t b, auto) { seen += b - a; });
    EXPECT_EQ(seen, 8001);
}

// A transfer that comes back short (here the file was cut under the run; on a file system that
// allocates on write, a full disk) is an error naming the files, not a partial group taken as
// whole.
TEST(StreamedState, AShortTransferIsAnErrorNamingTheFiles) {
    TempDir dir;
    StateFiles files(dir.path, 0, {"a"}, kSlices);
    StreamedState s(files, 1024);
    fs::resize_file(files.path(0), files.offset(2, 1024));  // the last slice's 2nd group on
    try {
        s.run(true, true, [](int, int64_t, int64_t, auto) {});
        FAIL() << "a short read passed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("reading group of slice 2 at float 1024"), std::string::npos) << m;
        EXPECT_NE(m.find(files.path(0).string()), std::string::npos) << m;
    }
}

TEST(StateFiles, RefusesAnothersFileAndRemovesItsOwn) {
    TempDir dir;
    const fs::path mine = dir.path / "weft-offload-rank3-a.bin";
    {
        StateFiles files(dir.path, 3, {"a"}, {10});
        EXPECT_EQ(files.path(0), mine);
        EXPECT_TRUE(fs::exists(mine));
    }
    EXPECT_FALSE(fs::exists(mine));
    std::ofstream(mine) << "someone's notes";
    try {
        StateFiles files(dir.path, 3, {"a"}, {10});
        FAIL() << "another program's file was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is not a weft offload file"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(fs::file_size(mine), 15u);
}

}  // namespace
}  // namespace weft::offload
