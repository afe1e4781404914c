// prepare_dataset on the bundled tinyshakespeare: llm.c's token counts, and the tokens without
// their end-of-text tokens decode back to the text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/prepare.hpp"
#include "weft/data/token_file.hpp"

namespace {

using weft::data::Gpt2Tokenizer;
using weft::data::TokenFile;
namespace fs = std::filesystem;

const fs::path kData = fs::path(WEFT_SOURCE_DIR) / "data";

class PrepareTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        tok_ = new Gpt2Tokenizer(Gpt2Tokenizer::load(kData / "encoder.json", kData / "vocab.bpe"));
    }
    static void TearDownTestSuite() { delete tok_; }
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("weft_prepare_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    static Gpt2Tokenizer* tok_;
    fs::path dir_;
};
Gpt2Tokenizer* PrepareTest::tok_ = nullptr;

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

std::vector<int32_t> tokens_of(const fs::path& p) {
    TokenFile f = TokenFile::open(p);
    return {f.data(), f.data() + f.size()};
}

TEST_F(PrepareTest, TinyShakespeareAsLlmc) {
    auto r = weft::data::prepare_dataset(kData / "tinyshakespeare.txt", dir_ / "out", *tok_);
    EXPECT_EQ(r.val_path, dir_ / "out" / "tinyshakespeare_val.bin");
    EXPECT_EQ(r.train_path, dir_ / "out" / "tinyshakespeare_train.bin");
    // llm.c's tinyshakespeare.py writes 32,768 val and 305,260 train tokens.
    EXPECT_EQ(r.val_tokens, 32768);
    EXPECT_EQ(r.train_tokens, 305260);

    std::vector<int32_t> all = tokens_of(r.val_path), train = tokens_of(r.train_path);
    ASSERT_EQ(int64_t(all.size()), r.val_tokens);
    ASSERT_EQ(int64_t(train.size()), r.train_tokens);
    all.insert(all.end(), train.begin(), train.end());
    EXPECT_EQ(all.front(), tok_->eot());
    EXPECT_EQ(std::count(all.begin(), all.end(), tok_->eot()), r.sections);

    std::erase(all, tok_->eot());
    EXPECT_EQ(tok_->decode(all), read(kData / "tinyshakespeare.txt"));
}

TEST_F(PrepareTest, SectionsKeepTheirSeparators) {
    fs::create_directories(dir_);
    const std::string text = "First part.\n\nSecond <|endoftext|> part\n\n\nthird\n\n";
    std::ofstream(dir_ / "small.txt", std::ios::binary) << text;
    auto r = weft::data::prepare_dataset(dir_ / "small.txt", dir_, *tok_, 3);
    EXPECT_EQ(r.sections, 4);  // the text ends in "\n\n", so an empty last section
    std::vector<int32_t> all = tokens_of(r.val_path), train = tokens_of(r.train_path);
    EXPECT_EQ(all.size(), 3u);
    all.insert(all.end(), train.begin(), train.end());
    EXPECT_EQ(all.back(), tok_->eot());
    EXPECT_EQ(std::count(all.begin(), all.end(), tok_->eot()), 4);  // the literal stays text
    std::erase(all, tok_->eot());
    EXPECT_EQ(tok_->decode(all), text);
}

// Each file's index lists its documents: every end-of-text token starts one, and the training
// file starts with the rest of the document the split cut.
TEST_F(PrepareTest, IndexesEachFilesDocuments) {
    fs::create_directories(dir_);
    std::ofstream(dir_ / "small.txt", std::ios::binary) << "One two three.\n\nFour.\n\nFive six.";
    auto r = weft::data::prepare_dataset(dir_ / "small.txt", dir_, *tok_, 3);
    for (const fs::path& p : {r.val_path, r.train_path}) {
        const TokenFile f = TokenFile::open(p);
        const std::vector<int32_t> toks = tokens_of(p);
        std::vector<int64_t> expected{0};
        for (size_t i = 1; i < toks.size(); ++i)
            if (toks[i] == tok_->eot()) expected.push_back(int64_t(i));
        EXPECT_EQ(weft::data::read_doc_index(weft::data::doc_index_path(p), f), expected) << p;
    }
    EXPECT_EQ(weft::data::doc_index_path(r.train_path), dir_ / "small_train.idx");
}

TEST_F(PrepareTest, MissingOrEmptyInputWritesNothing) {
    fs::create_directories(dir_);
    auto expect_error = [&](const fs::path& in, const std::string& also) {
        try {
            weft::data::prepare_dataset(in, dir_ / "out", *tok_);
            ADD_FAILURE() << "prepared " << in;
        } catch (const weft::Error& e) {
            EXPECT_NE(std::string(e.what()).find(in.string()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
        }
        EXPECT_FALSE(fs::exists(dir_ / "out"));
    };
    expect_error(dir_ / "missing.txt", "does not exist");
    std::ofstream(dir_ / "empty.txt").close();
    expect_error(dir_ / "empty.txt", "empty");
    std::ofstream(dir_ / "short.txt") << "Too short.";
    expect_error(dir_ / "short.txt", "expected more than the 32768 validation tokens");
}

}  // namespace
