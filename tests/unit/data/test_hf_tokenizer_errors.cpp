// Every tokenizer.json weft cannot read faithfully is refused with one weft::Error naming the
// file and the value at fault. Each case is the committed test tokenizer with one thing changed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kTokenizers = fs::path(WEFT_SOURCE_DIR) / "tests/data/tokenizers";

class HfTokenizerErrors : public testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("weft_hf_errors_" + std::to_string(::getpid()) + "_" +
                testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ifstream in(kTokenizers / "llama3" / "tokenizer.json");
        base_ = json::parse(in);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write(const std::string& name, const std::string& text) {
        fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }

    // Loads `path` and expects an error whose message holds every one of `wants`.
    void expect_error(const fs::path& path, const std::vector<std::string>& wants) {
        try {
            weft::data::load_tokenizer(path);
            ADD_FAILURE() << "loaded " << path;
        } catch (const weft::Error& e) {
            const std::string what = e.what();
            for (const std::string& want : wants)
                EXPECT_NE(what.find(want), std::string::npos)
                    << "'" << want << "' not in: " << what;
        }
    }

    // The base tokenizer changed by `edit`, written and loaded.
    void expect_error(const std::function<void(json&)>& edit,
                      const std::vector<std::string>& wants) {
        json j = base_;
        edit(j);
        const fs::path p = write("tokenizer.json", j.dump());
        std::vector<std::string> all = wants;
        all.push_back(p.string());
        expect_error(p, all);
    }

    fs::path dir_;
    json base_;
};

TEST_F(HfTokenizerErrors, TheBaseLoads) {
    write("tokenizer.json", base_.dump());
    EXPECT_EQ(weft::data::load_tokenizer(dir_)->vocab_size(), 128000);
}

TEST_F(HfTokenizerErrors, MissingFile) {
    expect_error(dir_ / "no_such_tokenizer.json", {"no_such_tokenizer.json", "does not exist"});
}

TEST_F(HfTokenizerErrors, DirectoryWithoutTokenizerJson) {
    write("vocab.json", "{}");
    expect_error(dir_, {dir_.string(), "has no tokenizer.json"});
}

TEST_F(HfTokenizerErrors, NotJson) {
    const fs::path p = write("tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
    expect_error(p, {p.string(), "not valid JSON"});
    expect_error(write("tokenizer.json", "[1, 2]"), {"expected a JSON object"});
}

TEST_F(HfTokenizerErrors, ModelTypes) {
    for (const char* type : {"WordPiece", "Unigram", "WordLevel"})
        expect_error([&](json& j) { j["model"]["type"] = type; },
                     {std::string("model type '") + type + "'", "byte-level BPE"});
}

TEST_F(HfTokenizerErrors, UnknownRegex) {
    const std::string regex = R"(\p{L}+|\p{N}+|\s+)";
    expect_error(
        [&](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex; },
        {"Split regex '" + regex + "' is not supported"});
    expect_error(
        [&](json& j) {
            j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
        },
        {"Split pattern {\"String\":\" \"} is not supported"});
    expect_error([&](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
                 {"Split behavior \"Removed\""});
}

TEST_F(HfTokenizerErrors, MergeWithUnknownToken) {
    expect_error(
        [](json& j) {
            j["model"]["merges"][7] = {"Ġt", "zzzq"};
        },
        {"merge 7", "'zzzq', which is not in model.vocab"});
    // The pair's concatenation must be a token too.
    expect_error([](json& j) { j["model"]["merges"][3] = "q Ġ"; },
                 {"merge 3", "'qĠ', which is not in model.vocab"});
    expect_error([](json& j) { j["model"]["merges"][2] = "a b c"; },
                 {"merge 2 is \"a b c\", expected \"left right\""});
    expect_error([](json& j) { j["model"]["merges"][5] = j["model"]["merges"][4]; },
                 {"merge 5", "appears twice"});
}

TEST_F(HfTokenizerErrors, VocabularyProblems) {
    expect_error([](json& j) { j["model"]["vocab"].erase("a"); }, {"no token for byte 0x61"});
    expect_error([](json& j) { j["model"]["vocab"]["b"] = 64; }, {"'b' has id 64, which another"});
    expect_error([](json& j) { j["model"]["vocab"]["b"] = -3; }, {"'b' has id -3"});
    expect_error([](json& j) { j["model"]["vocab"] = json::array(); },
                 {"model.vocab is [], expected an object"});
}

TEST_F(HfTokenizerErrors, NotByteLevel) {
    expect_error(
        [](json& j) {
            j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
        },
        {"pre_tokenizer 'Metaspace' is not supported"});
    expect_error([](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer is null"});
    expect_error([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); },
                 {"pre_tokenizer has no ByteLevel"});
    expect_error(
        [](json& j) {
            j["decoder"] = {{"type", "Metaspace"}};
        },
        {"decoder {\"type\":\"Metaspace\"} is not supported"});
    expect_error(
        [](json& j) {
            j["normalizer"] = {{"type", "Lowercase"}};
        },
        {"normalizer 'Lowercase' is not supported"});
    expect_error([](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"});
    expect_error([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout is 0.1"});
    expect_error(
        [](json& j) {
            auto& p = j["pre_tokenizer"]["pretokenizers"];
            p.push_back(p[0]);
        },
        {"pre_tokenizer Split comes after ByteLevel"});
}

TEST_F(HfTokenizerErrors, AddedTokens) {
    expect_error([](json& j) { j["added_tokens"][1]["lstrip"] = true; },
                 {"added token '<|end_of_text|>' sets lstrip"});
    expect_error([](json& j) { j["added_tokens"][0]["content"] = ""; }, {"has no content or id"});
    // Hugging Face would give it 5261 whatever the file says.
    expect_error([](json& j) { j["added_tokens"][0]["id"] = 128000; },
                 {"added token '<|begin_of_text|>' has id 128000, but Hugging Face's tokenizers "
                  "gives it id 5261"});
}

TEST_F(HfTokenizerErrors, EndOfText) {
    // No tokenizer_config.json beside it and none of the three names: nothing to put between
    // documents.
    expect_error([](json& j) { j["added_tokens"][1]["content"] = "<|eos|>"; },
                 {"no end-of-text token"});
    json j = base_;
    write("tokenizer.json", j.dump());
    const fs::path config = write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
    expect_error(dir_, {config.string(), "eos_token '<|nope|>' is not a token"});
    write("tokenizer_config.json", R"({"eos_token": 7})");
    expect_error(dir_, {config.string(), "eos_token is 7"});
    write("tokenizer_config.json", "not json");
    expect_error(dir_, {config.string(), "not valid JSON"});
    write("tokenizer_config.json", R"({"eos_token": {"content": "<|eot_id|>"}})");
    EXPECT_EQ(weft::data::load_tokenizer(dir_)->eot(), 5263);
}

}  // namespace
