// GPT-2 BPE against encodings from OpenAI's encoder.py (run with the Python `regex` module), and
// the whole bundled corpus through encode and decode.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/encoder_json.hpp"
#include "weft/data/pretokenize.hpp"
#include "weft/data/tokenizer.hpp"

namespace {

using weft::data::Gpt2Spelling;
using weft::data::Gpt2Tokenizer;
using weft::data::read_gpt2_spelling;

const std::filesystem::path kData = std::filesystem::path(WEFT_SOURCE_DIR) / "data";

const Gpt2Tokenizer& gpt2() {
    static const Gpt2Tokenizer tok =
        Gpt2Tokenizer::load(kData / "encoder.json", kData / "vocab.bpe");
    return tok;
}

struct Case {
    std::string text;
    std::vector<int32_t> tokens;
};

// Expected tokens from encoder.py.
const Case kCases[] = {
    {"Hello world", {15496, 995}},
    {" Hello world", {18435, 995}},
    {"I'm can't we'll they've you're he'd she's",
     {40, 1101, 460, 470, 356, 1183, 484, 1053, 345, 821, 339, 1549, 673, 338}},
    {"'S 'LL 'Re", {6, 50, 705, 3069, 705, 3041}},
    {"12345 67 3.14159", {10163, 2231, 8275, 513, 13, 1415, 19707}},
    {"a  b   c", {64, 220, 275, 220, 220, 269}},
    {"line1\nline2\n\n  x\n", {1370, 16, 198, 1370, 17, 628, 220, 2124, 198}},
    {"trailing spaces   ", {9535, 4386, 9029, 220, 220, 220}},
    {"\t\ttabs\r\nCRLF", {197, 197, 8658, 82, 201, 198, 34, 7836, 37}},
    {"café 日本 😀", {66, 1878, 2634, 10545, 245, 98, 17312, 105, 30325, 222}},
    {"Héllo wörld", {39, 2634, 18798, 266, 30570, 335}},
    {"x2y", {87, 17, 88}},
    {"hello!!!? (ok)", {31373, 10185, 30, 357, 482, 8}},
    {"ﬁ ½ Ⅻ ٣", {171, 105, 223, 25208, 2343, 227, 104, 18923, 96}},
    {"The quick brown fox jumps over the lazy dog.",
     {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
    {"  \u3000word\u00a0x", {220, 220, 5099, 222, 4775, 1849, 87}},
    {"ÀÉÎÕÜ ß", {127, 222, 38351, 127, 236, 127, 243, 127, 250, 6184, 253}},
    {"2024-05-20: $100 @user #tag",
     {1238, 1731, 12, 2713, 12, 1238, 25, 720, 3064, 2488, 7220, 1303, 12985}},
    {"first\n\n\nsecond", {11085, 628, 198, 12227}},
};

TEST(Tokenizer, MatchesEncoderPy) {
    for (const Case& c : kCases) {
        EXPECT_EQ(gpt2().encode(c.text), c.tokens) << "text: '" << c.text << "'";
        EXPECT_EQ(gpt2().decode(c.tokens), c.text);
    }
}

TEST(Tokenizer, SizesAndEndOfText) {
    EXPECT_EQ(gpt2().vocab_size(), 50257);
    EXPECT_EQ(gpt2().eot(), 50256);
    EXPECT_EQ(gpt2().encode("<|endoftext|>"), std::vector<int32_t>{50256});
    EXPECT_EQ(gpt2().encode("Hi<|endoftext|>there"), (std::vector<int32_t>{17250, 50256, 8117}));
    EXPECT_EQ(gpt2().encode_ordinary("<|endoftext|>"),
              (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
    EXPECT_EQ(gpt2().decode_token(50256), "<|endoftext|>");
    EXPECT_TRUE(gpt2().encode("").empty());
}

// What a GGUF file's tokenizer holds: the files' spellings, in id and rank order.
TEST(Tokenizer, Gpt2Spelling) {
    const Gpt2Spelling s = read_gpt2_spelling(kData / "encoder.json", kData / "vocab.bpe");
    ASSERT_EQ(s.tokens.size(), 50257u);
    EXPECT_EQ(s.tokens[50256], "<|endoftext|>");
    EXPECT_EQ(s.tokens[198], "\u010a");  // "\n", spelled as encoder.py spells byte 0x0a
    EXPECT_EQ(s.eot, 50256);
    ASSERT_EQ(s.merges.size(), 50000u);
    EXPECT_EQ(s.merges[0], "\u0120 t");  // "Ġ t", the first line after "#version"
}

TEST(Tokenizer, DecodeTokenGivesRawBytes) {
    EXPECT_EQ(gpt2().decode_token(220), " ");
    EXPECT_EQ(gpt2().decode_token(198), "\n");
    EXPECT_EQ(gpt2().decode_token(18435), " Hello");
    // The emoji is two tokens, each a part of its UTF-8 sequence.
    EXPECT_EQ(gpt2().decode_token(30325) + gpt2().decode_token(222), " 😀");
    EXPECT_EQ(gpt2().decode_token(222), "\x80");
}

TEST(Tokenizer, BadTokenIdIsAnError) {
    std::vector<int32_t> bad{15496, 50257};
    try {
        gpt2().decode(bad);
        FAIL() << "decode accepted id 50257";
    } catch (const weft::Error& e) {
        EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos) << e.what();
    }
    EXPECT_THROW(gpt2().decode_token(-1), weft::Error);
}

TEST(Tokenizer, ArbitraryBytesRoundTrip) {
    // Invalid UTF-8 is not text encoder.py could read, but no byte may be lost.
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    bytes += "\xE0\x80\xAF \xED\xA0\x80 \xF4\x90\x80\x80 abc\xC3";
    EXPECT_EQ(gpt2().decode(gpt2().encode_ordinary(bytes)), bytes);
}

TEST(Pretokenize, MatchesTheRegex) {
    struct Split {
        std::string text;
        std::vector<std::string_view> pieces;
    };
    // Expected pieces from regex.findall with GPT-2's pattern.
    const Split splits[] = {
        {"a \n b", {"a", " \n", " b"}},
        {"x  \n\n y", {"x", "  \n\n", " y"}},
        {" 's", {" '", "s"}},
        {"  ", {"  "}},
        {"\u3000\u3000a", {"\u3000", "\u3000", "a"}},
        {"don't!'ll", {"don", "'t", "!'", "ll"}},
        {" ?!x", {" ?!", "x"}},
        {"ab12cd", {"ab", "12", "cd"}},
        {" \n", {" \n"}},
        {"end \n", {"end", " \n"}},
    };
    for (const Split& s : splits)
        EXPECT_EQ(weft::data::pretokenize(s.text), s.pieces) << "text: '" << s.text << "'";
}

TEST(Pretokenize, CharClasses) {
    using weft::data::char_class;
    using weft::data::CharClass;
    EXPECT_EQ(char_class('a'), CharClass::kLetter);
    EXPECT_EQ(char_class('7'), CharClass::kNumber);
    EXPECT_EQ(char_class('\v'), CharClass::kSpace);
    EXPECT_EQ(char_class(0x1C), CharClass::kOther);     // str.isspace() says yes, \s says no
    EXPECT_EQ(char_class(0xE9), CharClass::kLetter);    // é
    EXPECT_EQ(char_class(0x65E5), CharClass::kLetter);  // 日
    EXPECT_EQ(char_class(0x0663), CharClass::kNumber);  // Arabic-Indic three
    EXPECT_EQ(char_class(0x216B), CharClass::kNumber);  // Roman numeral twelve
    EXPECT_EQ(char_class(0x3000), CharClass::kSpace);   // ideographic space
    EXPECT_EQ(char_class(0x1F600), CharClass::kOther);  // emoji
    EXPECT_EQ(char_class(0x10FFFF), CharClass::kOther);
}

TEST(EncoderJson, EscapesAndSurrogates) {
    auto entries = weft::data::parse_string_int_object(
        R"( {"a\"b": 0, "\u0120x": 1, "\ud83d\ude00": 2, "\\\/\n": -3, "": 4} )", "t.json");
    ASSERT_EQ(entries.size(), 5u);
    EXPECT_EQ(entries[0], (std::pair<std::string, int64_t>{"a\"b", 0}));
    EXPECT_EQ(entries[1].first, "\u0120x");
    EXPECT_EQ(entries[2].first, "😀");
    EXPECT_EQ(entries[3], (std::pair<std::string, int64_t>{"\\/\n", -3}));
    EXPECT_EQ(entries[4].first, "");
    EXPECT_TRUE(weft::data::parse_string_int_object("{}", "t.json").empty());
}

TEST(EncoderJson, ErrorsNameTheFile) {
    for (const char* bad : {R"({"a": 1,})", R"({"a" 1})", R"({"a": 1.5})", R"({"\ud83d": 1})",
                            R"({"a": 1} x)", R"({"a": 1)", R"({"\q": 1})"}) {
        try {
            weft::data::parse_string_int_object(bad, "dir/vocab.json");
            ADD_FAILURE() << "accepted " << bad;
        } catch (const weft::Error& e) {
            EXPECT_NE(std::string(e.what()).find("dir/vocab.json"), std::string::npos) << e.what();
        }
    }
}

TEST(Tokenizer, MissingFileNamesThePath) {
    try {
        Gpt2Tokenizer::load(kData / "no_such_encoder.json", kData / "vocab.bpe");
        FAIL() << "loaded a missing file";
    } catch (const weft::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no_such_encoder.json"), std::string::npos);
    }
}

TEST(Tokenizer, WholeCorpusRoundTrips) {
    std::ifstream in(kData / "tinyshakespeare.txt", std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    ASSERT_EQ(text.size(), 1115394u);

    const Gpt2Tokenizer fresh = Gpt2Tokenizer::load(kData / "encoder.json", kData / "vocab.bpe");
    auto start = std::chrono::steady_clock::now();
    std::vector<int32_t> tokens = fresh.encode(text);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("encoded %zu bytes into %zu tokens in %.3f s (%.1f MB/s, cold cache)\n",
                text.size(), tokens.size(), seconds, text.size() / seconds / 1e6);
    EXPECT_EQ(tokens.size(), 338025u);  // the well-known GPT-2 count for tinyshakespeare
    EXPECT_EQ(fresh.decode(tokens), text);
}

}  // namespace
