// prepare_dataset with tokenizer.json tokenizers: ids past 65535 are written in llm.c's uint32
// layout (each file holds some here), smaller vocabularies in uint16; the end-of-text token is
// the tokenizer's, and the tokens without it decode back to the text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "weft/data/prepare.hpp"
#include "weft/data/token_file.hpp"
#include "weft/data/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kTokenizers = fs::path(WEFT_SOURCE_DIR) / "tests/data/tokenizers";

class PrepareTokenizerTest : public testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("weft_prepare_tok_" + std::to_string(::getpid()) + "_" +
                testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "story.txt", std::ios::binary) << kText;
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Both files' tokens, val first, checked to decode (less the end-of-text tokens) to kText.
    std::vector<int32_t> check_round_trip(const weft::data::Tokenizer& tok,
                                          const weft::data::PrepareResult& r, int token_bytes) {
        std::vector<int32_t> all;
        for (const fs::path& p : {r.val_path, r.train_path}) {
            auto f = weft::data::TokenFile::open(p);
            EXPECT_EQ(f.token_bytes(), token_bytes) << p;
            std::vector<int32_t> t(f.size());
            f.read(0, f.size(), t.data());
            all.insert(all.end(), t.begin(), t.end());
        }
        std::vector<int32_t> text_tokens;
        std::copy_if(all.begin(), all.end(), std::back_inserter(text_tokens),
                     [&](int32_t t) { return t != tok.eot(); });
        EXPECT_EQ(tok.decode(text_tokens), kText);
        EXPECT_EQ(std::count(all.begin(), all.end(), tok.eot()), 3);
        EXPECT_EQ(all.front(), tok.eot());
        return all;
    }

    static constexpr const char* kText =
        "weft weft  weft: a story.\n\nIn 2024 it wove 1234 threads <|end_of_text|>\n\n"
        "Привет, мир! The end of weft.\n";
    fs::path dir_;
};

TEST_F(PrepareTokenizerTest, WideVocabularyWritesUint32) {
    auto tok = weft::data::load_tokenizer(kTokenizers / "llama3");
    ASSERT_GT(tok->vocab_size(), 65536);
    auto r = weft::data::prepare_dataset(dir_ / "story.txt", dir_ / "out", *tok, 5);
    EXPECT_EQ(r.sections, 3);
    EXPECT_EQ(r.val_tokens, 5);
    std::vector<int32_t> all = check_round_trip(*tok, r, 4);
    EXPECT_EQ(static_cast<int64_t>(all.size()), r.val_tokens + r.train_tokens);
    // " weft" is id 127995 here; the literal "<|end_of_text|>" is text, not the token 5262.
    EXPECT_EQ(std::count(all.begin(), all.end(), 127995), 3);
    EXPECT_EQ(all[1], 127996);  // "weft" at the start of the text
}

TEST_F(PrepareTokenizerTest, NarrowVocabularyWritesUint16) {
    auto tok = weft::data::load_tokenizer(kTokenizers / "smollm" / "tokenizer.json");
    auto r = weft::data::prepare_dataset(dir_ / "story.txt", dir_ / "out", *tok, 5);
    check_round_trip(*tok, r, 2);
}

}  // namespace
