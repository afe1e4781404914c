// A tokenizer.json as llama.cpp's "gpt2" GGUF tokenizer: the pre-tokenizer's llama.cpp name per
// family, token types, BOS/EOS and the spellings, on the test tokenizers (tests/data/tokenizers).
#include <gtest/gtest.h>

#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer.hpp"

namespace weft::data {
namespace {

namespace fs = std::filesystem;
const fs::path kTokenizers = fs::path(WEFT_SOURCE_DIR) / "tests/data/tokenizers";

TEST(HfSpelling, PreTokenizerNamesAsLlamaCppCallsThem) {
    EXPECT_EQ(read_hf_spelling(kTokenizers / "gpt2").pre, "gpt-2");
    EXPECT_EQ(read_hf_spelling(kTokenizers / "llama3").pre, "llama-bpe");
    EXPECT_EQ(read_hf_spelling(kTokenizers / "qwen2").pre, "qwen2");
    EXPECT_EQ(read_hf_spelling(kTokenizers / "smollm").pre, "smollm");
    // Digits keeping runs together and add_prefix_space: no llama.cpp pre-tokenizer does that.
    try {
        read_hf_spelling(kTokenizers / "prefix_digits");
        FAIL() << "prefix_digits was given a llama.cpp pre-tokenizer";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("llama.cpp has no pre-tokenizer equal to"),
                  std::string::npos)
            << e.what();
    }
}

TEST(HfSpelling, TokensTypesAndSpecialIds) {
    const HfSpelling q = read_hf_spelling(kTokenizers / "qwen2" / "tokenizer.json");
    ASSERT_EQ(q.tokens.size(), 5260u);
    ASSERT_EQ(q.types.size(), q.tokens.size());
    EXPECT_EQ(q.tokens[220], "\xC4\xA0");  // " " as GPT-2's alphabet spells it: "Ġ"
    EXPECT_EQ(q.types[220], 1);
    EXPECT_EQ(q.tokens[5257], "<|im_start|>");
    EXPECT_EQ(q.types[5257], 3);  // special: control
    EXPECT_EQ(q.tokens[5259], "<tool_call>");
    EXPECT_EQ(q.types[5259], 4);  // not special: user-defined
    EXPECT_EQ(q.eos, 5258);       // tokenizer_config.json's eos_token, <|im_end|>
    EXPECT_EQ(q.bos, -1);
    ASSERT_EQ(q.merges.size(), 5000u);
    EXPECT_EQ(q.merges[0], "\xC4\xA0 t");  // from the pair ["Ġ", "t"]

    // Llama 3's: ids up to 127999 with holes (pads, unused), BOS from tokenizer_config.json.
    const HfSpelling l = read_hf_spelling(kTokenizers / "llama3");
    ASSERT_EQ(l.tokens.size(), 128000u);
    EXPECT_EQ(l.tokens[6000], "[PAD6000]");
    EXPECT_EQ(l.types[6000], 5);
    EXPECT_EQ(l.tokens[5261], "<|begin_of_text|>");
    EXPECT_EQ(l.bos, 5261);
    EXPECT_EQ(l.eos, 5262);
}

}  // namespace
}  // namespace weft::data
