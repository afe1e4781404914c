// The offloaded state's files and their streaming: every element of every slice makes the round
// trip through the pool and the ring, groups cut across slices of sizes that are not multiples
// of a block, and byte streams cut at their blocks; a failing callback leaves no transfer in
// flight; the files are weft's alone and gone afterwards.
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

float* floats(std::byte* p) {
    return reinterpret_cast<float*>(p);
}

const std::vector<int64_t> kSlices = {5000, 1, 3000};  // 9 groups of at most 1024

TEST(StreamedState, EveryElementMakesTheRoundTrip) {
    TempDir dir;
    StreamedState s(dir.path, 0, {"a", "b"}, StateShape::fp32(kSlices, 2),
                    1000);  // rounded up to a block, 1024
    EXPECT_EQ(s.group_floats(), 1024);
    EXPECT_EQ(s.groups().size(), 9u);
    const PassStats w = s.run(false, true, [](int slice, int64_t a, int64_t b, auto st) {
        for (int k = 0; k < 2; ++k)
            for (int64_t i = a; i < b; ++i) floats(st[size_t(k)])[i - a] = value(k, slice, i);
    });
    EXPECT_EQ(w.read_bytes, 0);
    EXPECT_EQ(w.written_bytes, 2 * 4 * (5120 + 1024 + 3072));  // each slice's blocks
    int64_t seen = 0;
    s.run(true, true, [&](int slice, int64_t a, int64_t b, auto st) {
        for (int k = 0; k < 2; ++k)
            for (int64_t i = a; i < b; ++i) {
                ASSERT_EQ(floats(st[size_t(k)])[i - a], value(k, slice, i)) << slice << " " << i;
                floats(st[size_t(k)])[i - a] += 1.0f;
            }
        seen += b - a;
    });
    EXPECT_EQ(seen, 8001);
    // A group read back through the page cache (slice 2's first), changed and put back.
    const auto [first, last] = s.groups_in(2, 1001, 1018);
    ASSERT_EQ(last - first, 1);
    EXPECT_EQ(s.groups()[size_t(first)].a, 0);
    std::vector<std::byte*> got = s.get(first);
    for (int64_t i = 1001; i < 1018; ++i) EXPECT_EQ(floats(got[1])[i], value(1, 2, i) + 1.0f);
    floats(got[0])[5] = -7.0f;
    s.put(first);
    s.run(true, false, [&](int slice, int64_t a, int64_t, auto st) {
        if (slice == 2 && a == 0) {
            EXPECT_EQ(floats(st[0])[5], -7.0f);
        }
    });
}

// State that is not one fp32 per element (8-bit AdamW's shape): a stream of a byte per element
// and one of 8 bytes per block of 100 elements, cut at blocks only. Groups hold whole blocks,
// and each stream's bytes make the round trip at the offset the shape gives them, whatever their
// alignment (the byte stream starts 3 bytes in).
TEST(StreamedState, ByteStreamsCutAtBlocks) {
    TempDir dir;
    const int64_t n = 5050, block = 100;
    StateShape shape{
        {n},
        2,
        [&](int, int k, int64_t a) { return k == 0 ? 3 + a : 8 * ((a + block - 1) / block); },
        [&](int, int64_t a) { return a / block * block; }};
    StreamedState s(dir.path, 0, {"q", "absmax"}, shape, 1024);
    for (const auto& g : s.groups()) {
        EXPECT_EQ(g.a % block, 0);
        EXPECT_TRUE(g.b == n || g.b % block == 0);
        EXPECT_LE(g.b - g.a, 1024);
    }
    auto byte_of = [](int64_t i) { return std::byte(uint8_t(i * 7 + 1)); };
    s.run(false, true, [&](int, int64_t a, int64_t b, auto st) {
        for (int64_t i = a; i < b; ++i) st[0][i - a] = byte_of(i);
        for (int64_t j = a / block; j < (b + block - 1) / block; ++j)
            reinterpret_cast<double*>(st[1])[j - a / block] = double(j);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(st[0]) % 16, uintptr_t((3 + a) % 16));
    });
    int64_t seen = 0;
    s.run(true, false, [&](int, int64_t a, int64_t b, auto st) {
        for (int64_t i = a; i < b; ++i) ASSERT_EQ(st[0][i - a], byte_of(i)) << i;
        for (int64_t j = a / block; j < (b + block - 1) / block; ++j)
            ASSERT_EQ(reinterpret_cast<double*>(st[1])[j - a / block], double(j)) << j;
        seen += b - a;
    });
    EXPECT_EQ(seen, n);
    // The pool's count bounds what the groups took: a byte stream priced at 4 per element (its
    // fp32 pieces), the absmaxes at 8 per block, a page over.
    const double widths[] = {4.0, 8.0 / double(block)};
    EXPECT_LE(s.pool_bytes(), pool_bytes(1024, widths));
}

TEST(StreamedState, AFailingUpdateLeavesNothingInFlight) {
    TempDir dir;
    StreamedState s(dir.path, 0, {"a"}, StateShape::fp32(kSlices, 1), 1024);
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
// allocates on write, a full disk) is an error naming the file, not a partial group taken as
// whole.
TEST(StreamedState, AShortTransferIsAnErrorNamingTheFile) {
    TempDir dir;
    StreamedState s(dir.path, 0, {"a"}, StateShape::fp32(kSlices, 1), 1024);
    const StateFiles& files = s.files();
    const int g = s.groups_in(2, 1024, 1025).first;  // the last slice's 2nd group on
    fs::resize_file(files.path(0), files.offset(0, g));
    try {
        s.run(true, true, [](int, int64_t, int64_t, auto) {});
        FAIL() << "a short read passed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("reading group of slice 2 at element 1024"), std::string::npos) << m;
        EXPECT_NE(m.find(files.path(0).string()), std::string::npos) << m;
    }
}

TEST(StateFiles, RefusesAnothersFileAndRemovesItsOwn) {
    TempDir dir;
    const fs::path mine = dir.path / "weft-offload-rank3-a.bin";
    {
        StateFiles files(dir.path, 3, {"a"}, std::vector<int64_t>{10});
        EXPECT_EQ(files.path(0), mine);
        EXPECT_TRUE(fs::exists(mine));
    }
    EXPECT_FALSE(fs::exists(mine));
    std::ofstream(mine) << "someone's notes";
    try {
        StateFiles files(dir.path, 3, {"a"}, std::vector<int64_t>{10});
        FAIL() << "another program's file was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is not a weft offload file"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(fs::file_size(mine), 15u);
}

}  // namespace
}  // namespace weft::offload
