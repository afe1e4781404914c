// Token files: llm.c's uint16 and uint32 layouts written and read back, nanoGPT's headerless
// format, the errors for files that are neither, and the vocabulary check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/token_file.hpp"

namespace {

using weft::data::TokenFile;
using weft::data::TokenFormat;
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
    static void expect_error(const fs::path& p, const std::string& also,
                             TokenFormat format = TokenFormat::llmc) {
        try {
            TokenFile::open(p, format);
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
    EXPECT_EQ(f.token_bytes(), 2);
    ASSERT_EQ(f.size(), 1001);
    EXPECT_EQ(std::vector<uint16_t>(f.data(), f.data() + f.size()), tokens);
    EXPECT_EQ(f.data32(), nullptr);

    TokenFile moved = std::move(f);  // the mapping moves with it
    EXPECT_EQ(moved.token(1000), tokens[1000]);
    EXPECT_EQ(f.data16(), nullptr);
    EXPECT_EQ(f.size(), 0);
}

// Reads every token through read() in pieces of `piece`, as the loader does.
std::vector<int64_t> read_all(const TokenFile& f, int64_t piece) {
    std::vector<int32_t> buf(piece);
    std::vector<int64_t> out;
    for (int64_t lo = 0; lo < f.size(); lo += piece) {
        const int64_t n = std::min(piece, f.size() - lo);
        f.read(lo, n, buf.data());
        out.insert(out.end(), buf.begin(), buf.begin() + n);
    }
    return out;
}

TEST_F(TokenFileTest, Uint32WithLargeIdsIsLlmcLlama3Layout) {
    // Llama 3's vocabulary: ids past 65535, up to 128255.
    std::vector<uint32_t> tokens(3001);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t((i * 104729 + 7) % 128256);
    tokens[17] = 128255;
    const fs::path p = dir_ / "llama.bin";
    weft::data::write_token_file(p, tokens);
    EXPECT_FALSE(fs::exists(dir_ / "llama.bin.tmp"));
    EXPECT_EQ(fs::file_size(p), 1024u + 4 * tokens.size());
    {
        std::ifstream in(p, std::ios::binary);
        int32_t header[3];
        in.read(reinterpret_cast<char*>(header), sizeof header);
        EXPECT_EQ(header[0], 20240801);  // llm.c's dev/data/data_common.py, "llama-3"
        EXPECT_EQ(header[1], 7);
        EXPECT_EQ(header[2], 3001);
    }

    TokenFile f = TokenFile::open(p);
    EXPECT_TRUE(f.has_header());
    EXPECT_EQ(f.token_bytes(), 4);
    ASSERT_EQ(f.size(), 3001);
    EXPECT_EQ(f.data16(), nullptr);
    ASSERT_NE(f.data32(), nullptr);
    EXPECT_EQ(std::vector<uint32_t>(f.data32(), f.data32() + f.size()), tokens);
    EXPECT_EQ(read_all(f, 64), std::vector<int64_t>(tokens.begin(), tokens.end()));
    EXPECT_EQ(f.token(17), 128255);
    EXPECT_THROW(f.data(), weft::Error);  // a uint16-only reader must not see uint32 tokens
}

TEST_F(TokenFileTest, Uint32ThatFitsIsWrittenAsUint16) {
    std::vector<uint32_t> tokens = {0, 1, 50256, 65535, 7};
    const fs::path p = dir_ / "narrow.bin";
    weft::data::write_token_file(p, tokens);
    EXPECT_EQ(fs::file_size(p), 1024u + 2 * tokens.size());
    TokenFile f = TokenFile::open(p);
    EXPECT_EQ(f.token_bytes(), 2);
    EXPECT_EQ(read_all(f, 3), (std::vector<int64_t>{0, 1, 50256, 65535, 7}));

    // One id past 16 bits makes the whole file uint32.
    tokens.push_back(65536);
    weft::data::write_token_file(p, tokens);
    TokenFile g = TokenFile::open(p);
    EXPECT_EQ(g.token_bytes(), 4);
    EXPECT_EQ(read_all(g, 4), (std::vector<int64_t>{0, 1, 50256, 65535, 7, 65536}));
}

TEST_F(TokenFileTest, Uint32LargerThanOneWriteChunk) {
    // Narrowing goes a chunk of 2^20 tokens at a time; the seam must not lose or repeat any.
    std::vector<uint32_t> tokens((1 << 20) + 3);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(i % 50257);
    const fs::path p = dir_ / "big.bin";
    weft::data::write_token_file(p, tokens);
    TokenFile f = TokenFile::open(p);
    ASSERT_EQ(f.token_bytes(), 2);
    ASSERT_EQ(f.size(), int64_t(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(f.data16()[i], tokens[i]) << i;
}

TEST_F(TokenFileTest, ReadOutsideTheFileIsAnError) {
    const fs::path p = dir_ / "r.bin";
    weft::data::write_token_file(p, some_tokens(10));
    TokenFile f = TokenFile::open(p);
    std::vector<int32_t> buf(16);
    f.read(0, 10, buf.data());
    f.read(10, 0, buf.data());
    EXPECT_THROW(f.read(1, 10, buf.data()), weft::Error);
    EXPECT_THROW(f.read(-1, 2, buf.data()), weft::Error);
    EXPECT_THROW(f.read(11, 0, buf.data()), weft::Error);
    EXPECT_THROW(f.read(5, -1, buf.data()), weft::Error);
    EXPECT_THROW(f.read(INT64_MAX, INT64_MAX, buf.data()), weft::Error);
    EXPECT_THROW(f.read(2, INT64_MAX, buf.data()), weft::Error);
    EXPECT_THROW(f.token(10), weft::Error);
    EXPECT_THROW(f.token(-1), weft::Error);
}

TEST_F(TokenFileTest, RewriteReplacesTheFile) {
    const fs::path p = dir_ / "x.bin";
    weft::data::write_token_file(p, some_tokens(10));
    weft::data::write_token_file(p, some_tokens(3));
    EXPECT_EQ(TokenFile::open(p).size(), 3);
}

TEST_F(TokenFileTest, HeaderlessIsNanoGptFormatOnlyWhenAskedFor) {
    const auto tokens = some_tokens(77);
    const fs::path p = write_bytes("nano.bin", tokens.data(), tokens.size() * 2);
    TokenFile f = TokenFile::open(p, TokenFormat::raw);
    EXPECT_FALSE(f.has_header());
    ASSERT_EQ(f.size(), 77);
    EXPECT_EQ(std::vector<uint16_t>(f.data(), f.data() + f.size()), tokens);
    // Read as llm.c's (the default), its first tokens are a bad magic, not tokens.
    expect_error(p, "bad header magic", TokenFormat::llmc);
    expect_error(p, "--data-format raw", TokenFormat::llmc);
}

TEST_F(TokenFileTest, AHeaderWithADamagedMagicIsNotReadAsTokens) {
    const fs::path p = dir_ / "llmc.bin";
    weft::data::write_token_file(p, some_tokens(100));
    for (int32_t magic : {weft::data::kTokenFileMagic + 1, weft::data::kTokenFileMagic - 1, 0}) {
        std::fstream(p, std::ios::binary | std::ios::in | std::ios::out)
            .write(reinterpret_cast<const char*>(&magic), 4);
        expect_error(p, "bad header magic " + std::to_string(magic) + ", expected 20240520");
    }
    // An intact llm.c file named raw is refused too: its header would be read as tokens.
    weft::data::write_token_file(p, some_tokens(100));
    expect_error(p, "starts with llm.c's header magic 20240520", TokenFormat::raw);
}

TEST_F(TokenFileTest, ParseTokenFormat) {
    EXPECT_EQ(weft::data::parse_token_format("llmc"), TokenFormat::llmc);
    EXPECT_EQ(weft::data::parse_token_format("raw"), TokenFormat::raw);
    EXPECT_THROW(weft::data::parse_token_format("nanogpt"), weft::Error);
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
    expect_error(write_bytes("v2.bin", header.data(), 1024), "version 2, expected version 1");
    header[0] = weft::data::kTokenFileMagic32, header[1] = 1;
    expect_error(write_bytes("l1.bin", header.data(), 1024), "version 1, expected version 7");
}

TEST_F(TokenFileTest, OddSizeHeaderless) {
    const char bytes[5] = {1, 2, 3, 4, 5};
    expect_error(write_bytes("odd.bin", bytes, 5), "odd size of 5 bytes", TokenFormat::raw);
}

TEST_F(TokenFileTest, EmptyAndMissing) {
    expect_error(write_bytes("empty.bin", "", 0), "empty");
    expect_error(dir_ / "missing.bin", "cannot open");
}

// Expects check_token_ids to throw a message naming the file, the position, the id and the
// vocabulary size.
void expect_bad_id(const TokenFile& f, int64_t vocab, int64_t position, int64_t id) {
    try {
        weft::data::check_token_ids(f, vocab);
        ADD_FAILURE() << "accepted id " << id << " for a vocabulary of " << vocab;
    } catch (const weft::Error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find(f.path().string()), std::string::npos) << msg;
        EXPECT_NE(msg.find("position " + std::to_string(position) + ","), std::string::npos) << msg;
        EXPECT_NE(msg.find("token id " + std::to_string(id) + " "), std::string::npos) << msg;
        EXPECT_NE(msg.find("vocabulary of " + std::to_string(vocab) + " "), std::string::npos)
            << msg;
    }
}

TEST_F(TokenFileTest, CheckTokenIdsFindsTheFirstIdOutsideTheVocabulary) {
    auto tokens = some_tokens(5000);  // all < 50257
    const fs::path p = dir_ / "ids.bin";
    weft::data::write_token_file(p, tokens);
    weft::data::check_token_ids(TokenFile::open(p), 50257);

    tokens[4999] = 50256;  // the last id of the vocabulary is fine
    weft::data::write_token_file(p, tokens);
    weft::data::check_token_ids(TokenFile::open(p), 50257);
    const auto first_max = std::find(tokens.begin(), tokens.end(), uint16_t(50256));
    expect_bad_id(TokenFile::open(p), 50256, first_max - tokens.begin(), 50256);

    tokens[3210] = 65535;  // what an llm.c file of another tokenizer may hold
    tokens[4000] = 50257;
    weft::data::write_token_file(p, tokens);
    expect_bad_id(TokenFile::open(p), 50257, 3210, 65535);
    // Every uint16 id fits a vocabulary of 65536 or more: nothing to find.
    weft::data::check_token_ids(TokenFile::open(p), 65536);
    weft::data::check_token_ids(TokenFile::open(p), 128256);

    tokens[0] = 50257;
    weft::data::write_token_file(p, tokens);
    expect_bad_id(TokenFile::open(p), 50257, 0, 50257);
}

TEST_F(TokenFileTest, CheckTokenIdsInParallelReportsTheFirstBadBlock) {
    // Many blocks of 2^16 tokens, scanned by several threads: the earliest bad position wins,
    // whichever thread finds which.
    std::vector<uint32_t> tokens(40 << 16, 5);
    tokens[0] = 128255;
    tokens[(33 << 16) + 9] = 128256;
    tokens[(21 << 16) + 77] = 200000;
    tokens[(21 << 16) + 78] = 128256;
    tokens[(39 << 16) + 1] = 0xFFFFFFFFu;
    const fs::path p = dir_ / "llama_ids.bin";
    weft::data::write_token_file(p, tokens);
    TokenFile f = TokenFile::open(p);
    ASSERT_EQ(f.token_bytes(), 4);
    expect_bad_id(f, 128256, (21 << 16) + 77, 200000);
    expect_bad_id(f, 128255, 0, 128255);
    // An id past INT32_MAX is refused too, and reported as the unsigned number on disk.
    tokens[(21 << 16) + 77] = 5, tokens[(21 << 16) + 78] = 5, tokens[(33 << 16) + 9] = 5;
    weft::data::write_token_file(p, tokens);
    expect_bad_id(TokenFile::open(p), 128256, (39 << 16) + 1, 4294967295);
    tokens[(39 << 16) + 1] = 5;
    weft::data::write_token_file(p, tokens);
    weft::data::check_token_ids(TokenFile::open(p), 128256);
}

TEST_F(TokenFileTest, CheckTokenIdsRefusesABadVocabularySize) {
    const fs::path p = dir_ / "v.bin";
    weft::data::write_token_file(p, some_tokens(4));
    TokenFile f = TokenFile::open(p);
    EXPECT_THROW(weft::data::check_token_ids(f, 0), weft::Error);
    EXPECT_THROW(weft::data::check_token_ids(f, -5), weft::Error);
    EXPECT_THROW(weft::data::check_token_ids(f, int64_t(1) << 40), weft::Error);
}

}  // namespace
