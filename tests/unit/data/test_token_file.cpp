// Token files: llm.c's header format written and read back, nanoGPT's headerless format, and the
// errors for files that are neither.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/token_file.hpp"

namespace {

using weft::data::TokenFile;
namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("weft_token_file_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write_bytes(const std::string& name, const void* data, size_t bytes) {
        fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary).write(static_cast<const char*>(data), bytes);
        return p;
    }
    // Expects open() to throw a weft::Error whose message names the file and `also`.
    static void expect_error(const fs::path& p, const std::string& also) {
        try {
            TokenFile::open(p);
            ADD_FAILURE() << "opened " << p;
        } catch (const weft::Error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
            EXPECT_NE(msg.find(also), std::string::npos) << msg;
        }
    }

    fs::path dir_;
};

std::vector<uint16_t> some_tokens(size_t n) {
    std::vector<uint16_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((i * 7919 + 13) % 50257);
    return t;
}

TEST_F(TokenFileTest, WriteThenReadRoundTrips) {
    const auto tokens = some_tokens(1001);
    const fs::path p = dir_ / "train.bin";
    weft::data::write_token_file(p, tokens);
    EXPECT_FALSE(fs::exists(dir_ / "train.bin.tmp"));
    EXPECT_EQ(fs::file_size(p), 1024u + 2 * tokens.size());

    TokenFile f = TokenFile::open(p);
    EXPECT_TRUE(f.has_header());
    ASSERT_EQ(f.size(), 1001);
    EXPECT_EQ(std::vector<uint16_t>(f.data(), f.data() + f.size()), tokens);

    TokenFile moved = std::move(f);  // the mapping moves with it
    EXPECT_EQ(moved.data()[1000], tokens[1000]);
    EXPECT_EQ(f.data(), nullptr);
}

TEST_F(TokenFileTest, RewriteReplacesTheFile) {
    const fs::path p = dir_ / "x.bin";
    weft::data::write_token_file(p, some_tokens(10));
    weft::data::write_token_file(p, some_tokens(3));
    EXPECT_EQ(TokenFile::open(p).size(), 3);
}

TEST_F(TokenFileTest, HeaderlessIsNanoGptFormat) {
    const auto tokens = some_tokens(77);
    const fs::path p = write_bytes("nano.bin", tokens.data(), tokens.size() * 2);
    TokenFile f = TokenFile::open(p);
    EXPECT_FALSE(f.has_header());
    ASSERT_EQ(f.size(), 77);
    EXPECT_EQ(std::vector<uint16_t>(f.data(), f.data() + f.size()), tokens);
}

TEST_F(TokenFileTest, TruncatedFileNamesExpectedAndActualBytes) {
    const fs::path p = dir_ / "cut.bin";
    weft::data::write_token_file(p, some_tokens(100));
    fs::resize_file(p, 1024 + 150);
    expect_error(p, "1174 bytes, expected 1224");

    int32_t magic = weft::data::kTokenFileMagic;
    expect_error(write_bytes("header_cut.bin", &magic, 4), "1024-byte header");
}

TEST_F(TokenFileTest, BadVersion) {
    std::vector<int32_t> header(256, 0);
    header[0] = weft::data::kTokenFileMagic, header[1] = 2, header[2] = 0;
    expect_error(write_bytes("v2.bin", header.data(), 1024), "version 2");
}

TEST_F(TokenFileTest, OddSizeHeaderless) {
    const char bytes[5] = {1, 2, 3, 4, 5};
    expect_error(write_bytes("odd.bin", bytes, 5), "odd size of 5 bytes");
}

TEST_F(TokenFileTest, EmptyAndMissing) {
    expect_error(write_bytes("empty.bin", "", 0), "empty");
    expect_error(dir_ / "missing.bin", "cannot open");
}

}  // namespace
