// HfTokenizer against token ids from Hugging Face's own tokenizers library, committed under
// tests/data/tokenizers/ by scripts/gen_tokenizer_golden.mjs: every tokenizer.json there, every
// case id for id and decoded back. WEFT_TOKENIZER_GOLDEN=DIR adds the directories of DIR (that
// script's --real output: real Llama 3 and Qwen3 files, too large to commit).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer.hpp"
#include "weft/data/pretokenize.hpp"
#include "weft/data/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using weft::data::Tokenizer;

const fs::path kSource(WEFT_SOURCE_DIR);
const fs::path kTokenizers = kSource / "tests/data/tokenizers";

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

// The golden directories: those committed, then those of $WEFT_TOKENIZER_GOLDEN.
std::vector<fs::path> golden_dirs() {
    std::vector<fs::path> dirs;
    auto add_children = [&](const fs::path& root) {
        std::vector<fs::path> found;
        for (const auto& e : fs::directory_iterator(root))
            if (fs::exists(e.path() / "golden.json")) found.push_back(e.path());
        std::sort(found.begin(), found.end());
        dirs.insert(dirs.end(), found.begin(), found.end());
    };
    add_children(kTokenizers);
    if (const char* extra = std::getenv("WEFT_TOKENIZER_GOLDEN")) add_children(extra);
    return dirs;
}

std::string test_name(const testing::TestParamInfo<fs::path>& info) {
    std::string name = info.param.parent_path() == kTokenizers ? "" : "extra_";
    for (char c : info.param.filename().string()) name += std::isalnum(c) ? c : '_';
    return name;
}

class Golden : public testing::TestWithParam<fs::path> {};

TEST_P(Golden, MatchesHuggingFace) {
    const fs::path dir = GetParam();
    const json golden = json::parse(read(dir / "golden.json"));
    const std::unique_ptr<Tokenizer> tok = weft::data::load_tokenizer(dir);
    EXPECT_EQ(tok->eot(), golden["eot"].get<int32_t>());
    EXPECT_EQ(tok->vocab_size(), golden["vocab_size"].get<int32_t>());
    int checked = 0;
    for (const json& c : golden["cases"]) {
        const std::string text = c["text"].get<std::string>();
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(text), ids) << dir << ": text " << json(text).dump();
        EXPECT_EQ(tok->decode(ids), c["decoded"].get<std::string>())
            << dir << ": text " << json(text).dump();
        ++checked;
    }
    EXPECT_GE(checked, 80);
    for (const json& f : golden["text_files"]) {
        const std::string text =
            read(kSource / f["path"].get<std::string>()).substr(0, f["bytes"].get<size_t>());
        const auto ids = f["ids"].get<std::vector<int32_t>>();
        std::vector<int32_t> got = tok->encode(text);
        EXPECT_EQ(got.size(), ids.size()) << dir;
        auto diff = std::mismatch(got.begin(), got.end(), ids.begin(), ids.end());
        EXPECT_TRUE(diff.first == got.end() && diff.second == ids.end())
            << dir << ": first difference at token " << (diff.first - got.begin());
        EXPECT_EQ(tok->decode(ids), f.value("decoded", text)) << dir;
    }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Golden, testing::ValuesIn(golden_dirs()), test_name);

TEST(HfTokenizer, AllConfigurationsArePresent) {
    // A golden directory lost would silently test less.
    for (const char* name : {"gpt2", "llama3", "qwen2", "smollm", "prefix_digits"})
        EXPECT_TRUE(fs::exists(kTokenizers / name / "golden.json")) << name;
}

TEST(HfTokenizer, EncodeOrdinaryKeepsAddedTokensAsText) {
    auto tok = weft::data::load_tokenizer(kTokenizers / "qwen2" / "tokenizer.json");
    EXPECT_EQ(tok->eot(), 5258);  // <|im_end|>, named by tokenizer_config.json
    const std::string text = "a<|endoftext|>b<tool_call>";
    EXPECT_EQ(tok->encode(text), (std::vector<int32_t>{64, 5256, 65, 5259}));
    std::vector<int32_t> ordinary = tok->encode_ordinary(text);
    EXPECT_GT(ordinary.size(), 8u);
    EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), 5256), 0);
    EXPECT_EQ(tok->decode(ordinary), text);
}

TEST(HfTokenizer, DecodeTokenAndBadIds) {
    auto tok = weft::data::load_tokenizer(kTokenizers / "llama3");
    EXPECT_EQ(tok->vocab_size(), 128000);
    EXPECT_EQ(tok->eot(), 5262);
    EXPECT_EQ(tok->decode_token(5262), "<|end_of_text|>");
    EXPECT_EQ(tok->decode_token(220), " ");
    EXPECT_EQ(tok->decode_token(127995), " weft");  // a vocabulary entry no merge makes
    // 5264..127994 have no token; nor has anything outside the range.
    for (int32_t bad : {-1, 6000, 127994, 128000}) {
        try {
            tok->decode_token(bad);
            ADD_FAILURE() << "decode_token accepted " << bad;
        } catch (const weft::Error& e) {
            EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos)
                << e.what();
        }
    }
}

// tokenizer.json made from GPT-2's own encoder.json and vocab.bpe, as Hugging Face's gpt2
// repository has it, must give exactly what Gpt2Tokenizer (checked against encoder.py) gives.
TEST(HfTokenizer, FullGpt2VocabularyMatchesGpt2Tokenizer) {
    const fs::path data = kSource / "data";
    json vocab = json::parse(read(data / "encoder.json"));
    json merges = json::array();
    std::istringstream lines(read(data / "vocab.bpe"));
    std::string line;
    std::getline(lines, line);  // #version
    while (std::getline(lines, line))
        if (!line.empty()) merges.push_back(line);
    json byte_level = {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", true},
                       {"use_regex", true}};
    json tj = {{"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
               {"normalizer", nullptr},
               {"pre_tokenizer", byte_level},
               {"decoder", byte_level},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    const fs::path dir = fs::temp_directory_path() / ("weft_hf_gpt2_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << tj.dump();
    auto hf = weft::data::load_tokenizer(dir / "tokenizer.json");
    fs::remove_all(dir);
    auto gpt2 = weft::data::Gpt2Tokenizer::load(data / "encoder.json", data / "vocab.bpe");

    EXPECT_EQ(hf->vocab_size(), 50257);
    EXPECT_EQ(hf->eot(), 50256);
    const std::string text = read(data / "tinyshakespeare.txt") + "<|endoftext|> I'm 1234567";
    const std::vector<int32_t> tokens = hf->encode(text);
    EXPECT_EQ(tokens, gpt2.encode(text));
    EXPECT_EQ(hf->encode_ordinary(text), gpt2.encode_ordinary(text));
    EXPECT_EQ(hf->decode(tokens), text);
}

// Pieces as Hugging Face splits them (Encoding.getWordIds() of the reference, for the llama3
// test tokenizer); the golden ids check them only through the merges.
TEST(Pretokenize, Llama3Pattern) {
    struct Split {
        std::string text;
        std::vector<std::string_view> pieces;
    };
    const Split splits[] = {
        {"'\u017Ftest 'Stest 'LLAMA 'llama",
         {"'\u017F", "test", " '", "Stest", " '", "LLAMA", " '", "llama"}},
        {"'ſ", {"'ſ"}},
        {"I'm DON'T they'll", {"I", "'m", " DON", "'T", " they", "'ll"}},
        {"1234567 3.14", {"123", "456", "7", " ", "3", ".", "14"}},
        {"a\r\nb \r\n  \r\n\ty", {"a", "\r\n", "b", " \r\n  \r\n", "\ty"}},
        {"x  \n\n  y", {"x", "  \n\n", " ", " y"}},
        {"hello!!!\n\nworld ...\r", {"hello", "!!!\n\n", "world", " ...\r"}},
        {"  x   ", {" ", " x", "   "}},
        {"(word) \u3000日本", {"(word", ")", " ", "\u3000日本"}},
        {"a\v\fb \uFEFFbom", {"a", "\v", "\fb", " \uFEFF", "bom"}},
    };
    for (const Split& s : splits) {
        std::vector<std::string_view> pieces;
        for (size_t pos = 0; pos < s.text.size();) {
            size_t end = weft::data::pretoken_end_llama3(s.text, pos, 3);
            pieces.push_back(std::string_view(s.text).substr(pos, end - pos));
            pos = end;
        }
        EXPECT_EQ(pieces, s.pieces) << "text: " << json(s.text).dump();
    }
}

}  // namespace
