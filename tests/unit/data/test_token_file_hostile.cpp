// Malformed and hostile token files: each is refused with one clean weft::Error naming the file,
// never a crash or a read outside the mapping. Run in the ASan+UBSan build of the suite, where an
// overflow in a size computation or a read of the wrong length shows up. (mmap'd pages are not
// ASan-instrumented; the bounds of every read are enforced by TokenFile::read itself, and the
// fuzz below reads each accepted file to its last token through every loader that fits.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/token_file.hpp"

namespace {

using weft::data::DataLoader;
using weft::data::kTokenFileMagic;
using weft::data::kTokenFileMagic32;
using weft::data::TokenFile;
using weft::data::TokenFormat;
namespace fs = std::filesystem;

constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();

class HostileTokenFileTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("weft_hostile_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write_bytes(const std::string& name, const std::vector<char>& bytes) {
        fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
        return p;
    }
    // An llm.c header (magic, version, count) followed by `data_bytes` bytes of token data.
    fs::path write_llmc(const std::string& name, int32_t magic, int32_t version, int32_t count,
                        size_t data_bytes) {
        std::vector<char> bytes(1024 + data_bytes, 0);
        const int32_t header[3] = {magic, version, count};
        std::memcpy(bytes.data(), header, sizeof header);
        return write_bytes(name, bytes);
    }
    // Expects open() to throw a weft::Error naming the file and containing `also`.
    static void expect_refused(const fs::path& p, const std::string& also,
                               TokenFormat format = TokenFormat::llmc) {
        SCOPED_TRACE(p.filename().string());
        try {
            TokenFile::open(p, format);
            ADD_FAILURE() << "opened " << p;
        } catch (const weft::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
            EXPECT_NE(msg.find(also), std::string::npos) << msg;
        }
    }

    fs::path dir_;
};

TEST_F(HostileTokenFileTest, TruncatedHeaders) {
    for (int32_t magic : {kTokenFileMagic, kTokenFileMagic32}) {
        for (size_t bytes : {4, 6, 8, 12, 100, 1020, 1022, 1023}) {
            std::vector<char> b(bytes, 0);
            std::memcpy(b.data(), &magic, 4);
            const fs::path p = write_bytes(
                "header_" + std::to_string(magic) + "_" + std::to_string(bytes) + ".bin", b);
            expect_refused(p, std::to_string(bytes) + " bytes, expected at least the 1024-byte");
        }
    }
}

TEST_F(HostileTokenFileTest, CountDisagreesWithTheData) {
    // More tokens promised than present, and bytes past the promised tokens.
    expect_refused(write_llmc("short16.bin", kTokenFileMagic, 1, 100, 2 * 50),
                   "1124 bytes, expected 1224 (header + 100 tokens of 2 bytes");
    expect_refused(write_llmc("short32.bin", kTokenFileMagic32, 7, 100, 4 * 50),
                   "1224 bytes, expected 1424 (header + 100 tokens of 4 bytes");
    expect_refused(write_llmc("long16.bin", kTokenFileMagic, 1, 10, 2 * 11), "trailing bytes");
    expect_refused(write_llmc("long32.bin", kTokenFileMagic32, 7, 10, 4 * 11), "trailing bytes");
    // The header promises tokens and no data follows at all.
    expect_refused(write_llmc("only_header.bin", kTokenFileMagic, 1, 5, 0), "truncated");
}

TEST_F(HostileTokenFileTest, HugeAndNegativeCounts) {
    // Counts whose byte size wraps to the real data size in 32-bit arithmetic: 2^30 uint32 tokens
    // are 2^32 bytes (0 mod 2^32), 2^31 - 1 uint16 tokens 2^32 - 2 bytes. Both must be refused.
    expect_refused(write_llmc("wrap32.bin", kTokenFileMagic32, 7, 1 << 30, 0),
                   "expected 4294968320");
    expect_refused(write_llmc("wrap16.bin", kTokenFileMagic, 1, kMax32, 0), "expected 4294968318");
    expect_refused(write_llmc("max32.bin", kTokenFileMagic32, 7, kMax32, 8), "truncated");
    for (int32_t count : {-1, -2, kMin32}) {
        expect_refused(
            write_llmc("neg16_" + std::to_string(count) + ".bin", kTokenFileMagic, 1, count, 4),
            "negative token count " + std::to_string(count));
        expect_refused(
            write_llmc("neg32_" + std::to_string(count) + ".bin", kTokenFileMagic32, 7, count, 4),
            "negative token count " + std::to_string(count));
    }
}

TEST_F(HostileTokenFileTest, SizesThatAreNotWholeTokens) {
    expect_refused(write_llmc("odd16.bin", kTokenFileMagic, 1, 1, 3),
                   "3 bytes after its header, not a whole number of 2-byte tokens");
    expect_refused(write_llmc("odd32.bin", kTokenFileMagic32, 7, 1, 6),
                   "6 bytes after its header, not a whole number of 4-byte tokens");
    expect_refused(write_llmc("one_byte32.bin", kTokenFileMagic32, 7, 0, 1), "1 bytes after");
    for (size_t bytes : {1, 3, 1025}) {
        std::vector<char> b(bytes, 1);
        expect_refused(write_bytes("bare_" + std::to_string(bytes) + ".bin", b),
                       "odd size of " + std::to_string(bytes) + " bytes", TokenFormat::raw);
    }
}

TEST_F(HostileTokenFileTest, UnknownVersions) {
    for (int32_t v : {0, 2, 3, 7, -1, kMax32})
        expect_refused(write_llmc("v16_" + std::to_string(v) + ".bin", kTokenFileMagic, v, 1, 2),
                       "magic 20240520 and version " + std::to_string(v) + ", expected version 1");
    for (int32_t v : {0, 1, 2, 3, 6, 8, kMin32})
        expect_refused(write_llmc("v32_" + std::to_string(v) + ".bin", kTokenFileMagic32, v, 1, 4),
                       "magic 20240801 and version " + std::to_string(v) + ", expected version 7");
}

TEST_F(HostileTokenFileTest, NoTokens) {
    expect_refused(write_bytes("empty.bin", {}), "is empty");
    expect_refused(write_llmc("zero16.bin", kTokenFileMagic, 1, 0, 0), "holds no tokens");
    expect_refused(write_llmc("zero32.bin", kTokenFileMagic32, 7, 0, 0), "holds no tokens");
    // What write_token_file produces for no tokens is refused on reading, as llm.c does.
    const fs::path p = dir_ / "written_empty.bin";
    weft::data::write_token_file(p, std::span<const uint16_t>());
    expect_refused(p, "holds no tokens");
}

TEST_F(HostileTokenFileTest, NotARegularFile) {
    expect_refused(dir_, "not a regular file");
    if (fs::exists("/dev/null")) {
        try {
            TokenFile::open("/dev/null");
            ADD_FAILURE() << "opened /dev/null";
        } catch (const weft::Error& e) {
            EXPECT_NE(std::string(e.what()).find("/dev/null"), std::string::npos) << e.what();
        }
    }
}

TEST_F(HostileTokenFileTest, OneTokenOpensButHoldsNoSample) {
    for (int32_t magic : {kTokenFileMagic, kTokenFileMagic32}) {
        const bool wide = magic == kTokenFileMagic32;
        const fs::path p =
            write_llmc(wide ? "one32.bin" : "one16.bin", magic, wide ? 7 : 1, 1, wide ? 4 : 2);
        TokenFile f = TokenFile::open(p);
        ASSERT_EQ(f.size(), 1);
        EXPECT_EQ(f.token(0), 0);
        for (int64_t T : {int64_t(1), int64_t(2), std::numeric_limits<int64_t>::max()}) {
            try {
                DataLoader loader(f, T, 0, false);
                ADD_FAILURE() << "a loader of T = " << T << " over one token";
            } catch (const weft::Error& e) {
                const std::string msg = e.what();
                EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
                EXPECT_NE(msg.find("has 1 tokens"), std::string::npos) << msg;
                EXPECT_NE(msg.find("sequence length " + std::to_string(T)), std::string::npos)
                    << msg;
            }
        }
    }
    // The smallest bare file: one uint16 token.
    const fs::path bare = write_bytes("bare_one.bin", {7, 0});
    TokenFile f = TokenFile::open(bare, TokenFormat::raw);
    EXPECT_EQ(f.token(0), 7);
    EXPECT_THROW(DataLoader(f, 1, 0, true), weft::Error);
}

// Random files near the valid layouts: a header from a handful of telling values, a random length
// of data. Whatever is accepted must be readable to its last token by every loader that fits and
// pass or fail the vocabulary check cleanly; whatever is refused must be a weft::Error.
TEST_F(HostileTokenFileTest, RandomFilesNearTheLayoutsFailCleanly) {
    std::mt19937_64 rng(20240520);
    const int32_t magics[] = {kTokenFileMagic, kTokenFileMagic32, 0, 12345};
    const int32_t versions[] = {1, 7, 0, 2, -1};
    const int32_t counts[] = {0, 1, 2, 3, 17, 400, -1, kMax32, 1 << 30, kMin32};
    int accepted = 0, accepted_llmc = 0, refused = 0;
    for (int i = 0; i < 400; ++i) {
        const bool header = rng() % 4 != 0;
        int32_t h[3] = {magics[rng() % 4], versions[rng() % 5], counts[rng() % 10]};
        size_t data = rng() % 1700;
        // Half the headers get the right version and a third exactly the data they promise, so
        // that some llm.c files are accepted.
        if (rng() % 2 == 0) h[1] = h[0] == kTokenFileMagic32 ? 7 : 1;
        if (header && h[2] >= 0 && h[2] <= 400 && rng() % 3 == 0)
            data = size_t(h[2]) * (h[0] == kTokenFileMagic32 ? 4 : 2);
        std::vector<char> bytes((header ? 1024 : 0) + data);
        for (char& c : bytes) c = char(rng());
        if (header) std::memcpy(bytes.data(), h, sizeof h);
        const fs::path p = write_bytes("fuzz_" + std::to_string(i) + ".bin", bytes);
        SCOPED_TRACE(p.string());
        // Mostly the format the file was made as, a quarter of the time the other.
        const TokenFormat format =
            header == (rng() % 4 != 0) ? TokenFormat::llmc : TokenFormat::raw;
        std::optional<TokenFile> f;
        try {
            f = TokenFile::open(p, format);
        } catch (const weft::Error& e) {
            EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
            ++refused;
            continue;
        }
        ++accepted;
        accepted_llmc += f->has_header();
        ASSERT_GE(f->size(), 1);
        ASSERT_LE(f->size() * f->token_bytes(), int64_t(bytes.size()));
        std::vector<int32_t> all(size_t(f->size()));
        f->read(0, f->size(), all.data());
        try {
            weft::data::check_token_ids(*f, 50257);
        } catch (const weft::Error&) {
        }
        for (int64_t T : {int64_t(1), int64_t(7), f->size() - 1, f->size()}) {
            if (T < 1) continue;
            if (T > f->size() - 1) {
                EXPECT_THROW(DataLoader(*f, T, 1, false), weft::Error);
                continue;
            }
            for (bool sequential : {true, false}) {
                DataLoader loader(*f, T, 3, sequential);
                std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
                for (int64_t g = 0; g < loader.windows(); ++g) {
                    loader.sample(g, 0, 1, in.data(), tg.data());
                    const int64_t start = loader.window(g, 0, 1) * T;
                    ASSERT_EQ(tg[size_t(T - 1)], all[size_t(start + T)]);
                }
            }
        }
    }
    // Both branches were exercised, or the test proves little.
    EXPECT_GT(accepted, 20);
    EXPECT_GT(accepted_llmc, 10);
    EXPECT_GT(refused, 100);
}

}  // namespace
