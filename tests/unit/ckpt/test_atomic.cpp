#include <gtest/gtest.h>

#include <stdexcept>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/atomic.hpp"
#include "weft/core/buffer.hpp"

namespace weft::ckpt {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_bytes;
using test::TempDir;

TEST(Atomic, WriteFileCreatesAndReplaces) {
    TempDir tmp;
    const fs::path p = tmp / "sub" / "f.txt";  // missing parent directories are created
    write_file_atomic(p, "first");
    EXPECT_EQ(read_bytes(p), "first");
    write_file_atomic(p, "second, longer");
    EXPECT_EQ(read_bytes(p), "second, longer");
    write_file_atomic(p, "");
    EXPECT_EQ(read_bytes(p), "");
    EXPECT_TRUE(test::temporaries_in(p.parent_path()).empty());
}

TEST(Atomic, UncommittedWriterLeavesTargetIntact) {
    TempDir tmp;
    const fs::path p = tmp / "f.txt";
    write_file_atomic(p, "old");
    {
        AtomicFileWriter w(p);
        w.write("new", 3);
        EXPECT_EQ(test::temporaries_in(tmp.path()).size(), 1u);  // written aside, not in place
        EXPECT_EQ(read_bytes(p), "old");
    }  // destroyed without commit, as when an exception unwinds
    EXPECT_EQ(read_bytes(p), "old");
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());
}

// write_uncached writes the same bytes as write() whatever the alignment: page-aligned bulk past
// the cache, then the tail; an unaligned file position or pointer goes through write().
TEST(Atomic, UncachedWriteKeepsEveryByte) {
    TempDir tmp;
    Buffer b(1 << 20);  // 4 MiB: page-aligned
    ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
    auto* bytes = reinterpret_cast<char*>(b.data());
    for (int64_t i = 0; i < b.bytes(); ++i) bytes[i] = char((i * 131 + i / 4099) & 0xff);
    const fs::path p = tmp / "shard.bin";
    AtomicFileWriter w(p);
    w.write_uncached(bytes, 3 * 4096 + 100);         // bulk direct, tail buffered
    w.write_uncached(bytes + 3 * 4096 + 100, 8192);  // file position unaligned
    w.write_uncached(bytes + 5 * 4096 + 7, 4096);    // pointer unaligned
    w.write_uncached(bytes + 6 * 4096 + 7, 50);      // shorter than a page
    w.commit();
    std::string want(bytes, 3 * 4096 + 100 + 8192);
    want.append(bytes + 5 * 4096 + 7, 4096);
    want.append(bytes + 6 * 4096 + 7, 50);
    EXPECT_EQ(read_bytes(p), want);
    EXPECT_EQ(fs::file_size(p), want.size());

    // A whole aligned shard in 1 MiB pieces, as the checkpoint writer sends it.
    const fs::path q = tmp / "whole.bin";
    AtomicFileWriter v(q);
    for (int64_t at = 0; at < b.bytes() - 10; at += 1 << 20)
        v.write_uncached(bytes + at, size_t(std::min<int64_t>(1 << 20, b.bytes() - 10 - at)));
    v.commit();
    EXPECT_EQ(read_bytes(q), std::string(bytes, size_t(b.bytes() - 10)));
}

TEST(Atomic, FsyncPath) {
    TempDir tmp;
    write_file_atomic(tmp / "f", "x");
    fsync_path(tmp / "f");
    fsync_path(tmp.path());
    std::string e = error_of([&] { fsync_path(tmp / "missing"); });
    EXPECT_NE(e.find((tmp / "missing").string()), std::string::npos) << e;
}

TEST(Atomic, WriteDirCreatesAndReplaces) {
    TempDir tmp;
    const fs::path target = tmp / "ckpt";
    write_dir_atomic(target, [](const fs::path& dir) {
        EXPECT_EQ(dir.filename().string().rfind(".tmp-ckpt-", 0), 0u) << dir;
        write_file_atomic(dir / "a", "v1");
        fs::create_directory(dir / "nested");
        write_file_atomic(dir / "nested" / "b", "v1");
    });
    EXPECT_EQ(read_bytes(target / "a"), "v1");
    EXPECT_EQ(read_bytes(target / "nested" / "b"), "v1");

    write_dir_atomic(target, [](const fs::path& dir) { write_file_atomic(dir / "c", "v2"); });
    EXPECT_EQ(read_bytes(target / "c"), "v2");
    EXPECT_FALSE(fs::exists(target / "a"));  // replaced whole, not merged
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());

    write_dir_atomic(tmp / "other/", [](const fs::path& dir) { write_file_atomic(dir / "x", ""); });
    EXPECT_TRUE(fs::exists(tmp / "other" / "x"));
}

TEST(Atomic, ThrowingFillLeavesNothingVisible) {
    TempDir tmp;
    const fs::path target = tmp / "ckpt";
    auto throwing = [](const fs::path& dir) {
        write_file_atomic(dir / "half", "partial");
        throw std::runtime_error("disk full");
    };
    EXPECT_THROW(write_dir_atomic(target, throwing), std::runtime_error);
    EXPECT_FALSE(fs::exists(target));
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());

    write_dir_atomic(target, [](const fs::path& dir) { write_file_atomic(dir / "a", "good"); });
    EXPECT_THROW(write_dir_atomic(target, throwing), std::runtime_error);
    EXPECT_EQ(read_bytes(target / "a"), "good");  // the previous version is intact
    EXPECT_FALSE(fs::exists(target / "half"));
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());
}

TEST(Atomic, StaleTemporaryOfSamePidIsReplaced) {
    // A crashed earlier run with the same pid (pid 1 in containers) left its temporary behind.
    TempDir tmp;
    const fs::path stale = tmp / (".tmp-ckpt-" + std::to_string(::getpid()));
    fs::create_directories(stale);
    write_file_atomic(stale / "junk", "x");
    write_dir_atomic(tmp / "ckpt", [](const fs::path& dir) { write_file_atomic(dir / "a", "y"); });
    EXPECT_FALSE(fs::exists(tmp / "ckpt" / "junk"));
    EXPECT_EQ(read_bytes(tmp / "ckpt" / "a"), "y");
}

TEST(Atomic, BadTargets) {
    TempDir tmp;
    std::string e = error_of([&] { write_dir_atomic(tmp / "..", [](const fs::path&) {}); });
    EXPECT_NE(e.find("expected a path ending in a directory name"), std::string::npos) << e;
}

}  // namespace
}  // namespace weft::ckpt
