#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/hf_llama_config.hpp"

namespace weft::ckpt {
namespace {

using nlohmann::json;
using test::error_of;
using test::TempDir;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// HuggingFaceTB/SmolLM-135M's config.json, as published.
const char* kSmolLM = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0,
  "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.02,
  "intermediate_size": 1536, "max_position_embeddings": 2048, "model_type": "llama",
  "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "torch_dtype": "float32", "transformers_version": "4.40.1",
  "use_cache": true, "vocab_size": 49152
})";

// meta-llama/Llama-3.1-8B's config.json, as published.
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256
})";

HfLlamaConfig read_text(const TempDir& dir, const std::string& text) {
    test::write_bytes(dir / "config.json", text);
    return read_hf_llama_config(dir.path());
}

HfLlamaConfig read_edited(const TempDir& dir, const char* base, auto edit) {
    json j = json::parse(base);
    edit(j);
    return read_text(dir, j.dump());
}

// The error reading kSmolLM with `edit` applied gives.
std::string error_with(const TempDir& dir, auto edit) {
    return error_of([&] { read_edited(dir, kSmolLM, edit); });
}

TEST(HfLlamaConfig, ReadsSmolLM135M) {
    TempDir dir;
    HfLlamaConfig c = read_text(dir, kSmolLM);
    EXPECT_EQ(c.hidden_size, 576);
    EXPECT_EQ(c.intermediate_size, 1536);
    EXPECT_EQ(c.num_hidden_layers, 30);
    EXPECT_EQ(c.num_attention_heads, 9);
    EXPECT_EQ(c.num_key_value_heads, 3);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.vocab_size, 49152);
    EXPECT_EQ(c.max_position_embeddings, 2048);
    EXPECT_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.rope_scaling, HfRopeScaling{});
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.bos_token_id, 0);
    EXPECT_EQ(c.eos_token_id, 0);
    EXPECT_TRUE(c.eos_token_ids.empty());
    EXPECT_EQ(read_hf_model_id(dir.path()).model_type, "llama");
}

TEST(HfLlamaConfig, ReadsLlama31_8B) {
    TempDir dir;
    HfLlamaConfig c = read_text(dir, kLlama31);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.intermediate_size, 14336);
    EXPECT_EQ(c.num_hidden_layers, 32);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.vocab_size, 128256);
    EXPECT_EQ(c.max_position_embeddings, 131072);
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling, (HfRopeScaling{.type = "llama3",
                                             .factor = 8,
                                             .low_freq_factor = 1,
                                             .high_freq_factor = 4,
                                             .original_max_position_embeddings = 8192}));
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.bos_token_id, 128000);
    EXPECT_EQ(c.eos_token_id, 128001);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(HfLlamaConfig, RoundTripAndTransformersKeys) {
    TempDir dir;
    HfLlamaConfig c = read_text(dir, kLlama31);
    c.rms_norm_eps = 1.2345678901234567e-6;  // every digit survives
    write_hf_llama_config(dir.path(), c);
    EXPECT_EQ(read_hf_llama_config(dir.path()), c);

    const json j = json::parse(test::read_bytes(dir / "config.json"));
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j["hidden_act"], "silu");
    EXPECT_EQ(j["attention_bias"], false);
    EXPECT_EQ(j["mlp_bias"], false);
    EXPECT_EQ(j["attention_dropout"], 0.0);
    EXPECT_EQ(j["initializer_range"], 0.02);
    EXPECT_EQ(j["pretraining_tp"], 1);
    EXPECT_EQ(j["use_cache"], true);
    EXPECT_EQ(j["torch_dtype"], "float32");
    EXPECT_EQ(j["head_dim"], 128);
    EXPECT_EQ(j["num_key_value_heads"], 8);
    EXPECT_EQ(j["tie_word_embeddings"], false);
    EXPECT_EQ(j["bos_token_id"], 128000);
    EXPECT_EQ(j["eos_token_id"], json::array({128001, 128008, 128009}));
    EXPECT_EQ(j["rope_scaling"], json::parse(R"({"factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"})"));
    EXPECT_TRUE(j["rope_theta"].is_number_float());

    // No scaling, tied, one eos id, no bos: null where transformers would otherwise use defaults.
    c = read_text(dir, kSmolLM);
    c.bos_token_id = -1;
    write_hf_llama_config(dir.path(), c);
    EXPECT_EQ(read_hf_llama_config(dir.path()), c);
    const json k = json::parse(test::read_bytes(dir / "config.json"));
    EXPECT_TRUE(k["rope_scaling"].is_null());
    EXPECT_TRUE(k["bos_token_id"].is_null());
    EXPECT_EQ(k["eos_token_id"], 0);
    EXPECT_EQ(k["tie_word_embeddings"], true);
    EXPECT_EQ(k["head_dim"], 64);

    c.rope_scaling = {.type = "linear", .factor = 2.5};
    write_hf_llama_config(dir.path(), c);
    EXPECT_EQ(read_hf_llama_config(dir.path()), c);
    EXPECT_EQ(json::parse(test::read_bytes(dir / "config.json"))["rope_scaling"],
              json::parse(R"({"factor": 2.5, "rope_type": "linear"})"));
    EXPECT_TRUE(test::temporaries_in(dir.path()).empty());
}

TEST(HfLlamaConfig, DefaultsAndOlderAndNewerRopeKeys) {
    TempDir dir;
    // Absent key-value heads and head_dim: as transformers, heads and hidden / heads.
    HfLlamaConfig c = read_edited(dir, kSmolLM, [](json& j) {
        j.erase("num_key_value_heads");
        j.erase("rms_norm_eps");
        j.erase("rope_theta");
        j.erase("tie_word_embeddings");
        j.erase("bos_token_id");
        j["head_dim"] = nullptr;
    });
    EXPECT_EQ(c.num_key_value_heads, 9);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.bos_token_id, -1);

    // An explicit head_dim need not divide hidden_size.
    c = read_edited(dir, kSmolLM, [](json& j) {
        j["hidden_size"] = 500;
        j["head_dim"] = 48;
    });
    EXPECT_EQ(c.head_dim, 48);

    // Files before transformers 4.43 say "type"; "default" is no scaling.
    c = read_edited(dir, kSmolLM, [](json& j) {
        j["rope_scaling"] = {{"type", "linear"}, {"factor", 4}};
    });
    EXPECT_EQ(c.rope_scaling, (HfRopeScaling{.type = "linear", .factor = 4}));
    c = read_edited(dir, kSmolLM, [](json& j) { j["rope_scaling"] = {{"rope_type", "default"}}; });
    EXPECT_EQ(c.rope_scaling, HfRopeScaling{});

    // transformers 5 writes rope_parameters, which carries rope_theta.
    c = read_edited(dir, kLlama31, [](json& j) {
        json rope = j["rope_scaling"];
        rope["rope_theta"] = 500000.0;
        j["rope_parameters"] = rope;
        j.erase("rope_scaling");
        j.erase("rope_theta");
    });
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling.type, "llama3");
    c = read_edited(dir, kSmolLM, [](json& j) {
        j["rope_parameters"] = {{"rope_theta", 100000}, {"rope_type", "default"}};
        j.erase("rope_scaling");
        j.erase("rope_theta");
    });
    EXPECT_EQ(c.rope_theta, 100000.0);
    EXPECT_EQ(c.rope_scaling, HfRopeScaling{});
}

TEST(HfLlamaConfig, ErrorMissingFileOrBadJson) {
    TempDir dir;
    const std::string file = (dir / "config.json").string();
    std::string e = error_of([&] { read_hf_llama_config(dir.path()); });
    EXPECT_TRUE(contains(e, "cannot read " + file)) << e;
    e = error_of([&] { read_text(dir, "{\"hidden_size\": 576,"); });
    EXPECT_TRUE(contains(e, file + " is not valid JSON")) << e;
    e = error_of([&] { read_text(dir, "[1]"); });
    EXPECT_TRUE(contains(e, file + " must hold a JSON object")) << e;
}

TEST(HfLlamaConfig, ErrorMissingSizeKey) {
    TempDir dir;
    const std::string file = (dir / "config.json").string();
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size", "max_position_embeddings"}) {
        std::string e = error_with(dir, [&](json& j) { j.erase(key); });
        EXPECT_TRUE(contains(e, fmt::format("{} has no \"{}\"", file, key))) << e;
    }
}

TEST(HfLlamaConfig, ErrorNonIntegerSize) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) { j["hidden_size"] = 576.0; });
    EXPECT_TRUE(contains(e, "\"hidden_size\" is 576.0, expected a positive integer")) << e;
    e = error_with(dir, [](json& j) { j["num_hidden_layers"] = "30"; });
    EXPECT_TRUE(contains(e, "\"num_hidden_layers\" is \"30\"")) << e;
    e = error_with(dir, [](json& j) { j["num_key_value_heads"] = 0; });
    EXPECT_TRUE(contains(e, "\"num_key_value_heads\" is 0")) << e;
    e = error_with(dir, [](json& j) { j["head_dim"] = -64; });
    EXPECT_TRUE(contains(e, "\"head_dim\" is -64")) << e;
}

TEST(HfLlamaConfig, ErrorHiddenNotDivisibleWithoutHeadDim) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) { j["num_attention_heads"] = 15; });
    EXPECT_TRUE(contains(e,
                         "hidden_size 576 is not divisible by num_attention_heads 15: head_dim x "
                         "heads != hidden without an explicit head_dim"))
        << e;
}

TEST(HfLlamaConfig, ErrorKvHeadsDoNotDivideHeads) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) { j["num_key_value_heads"] = 4; });
    EXPECT_TRUE(contains(e, "num_attention_heads 9 is not divisible by num_key_value_heads 4"))
        << e;
}

TEST(HfLlamaConfig, ErrorUnsupportedRopeType) {
    TempDir dir;
    for (const char* type : {"yarn", "dynamic", "longrope"}) {
        std::string e = error_with(dir, [&](json& j) {
            j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
        });
        EXPECT_TRUE(contains(e, fmt::format("rope_scaling type \"{}\" is not supported", type)))
            << e;
    }
    std::string e = error_with(dir, [](json& j) { j["rope_scaling"] = {{"factor", 4.0}}; });
    EXPECT_TRUE(contains(e, "\"rope_scaling\" has no \"rope_type\"")) << e;
    e = error_with(dir, [](json& j) { j["rope_scaling"] = "linear"; });
    EXPECT_TRUE(contains(e, "\"rope_scaling\" is \"linear\", expected an object or null")) << e;
}

TEST(HfLlamaConfig, ErrorIncompleteLlama3Scaling) {
    TempDir dir;
    for (const char* key :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
        std::string e = error_of(
            [&] { read_edited(dir, kLlama31, [&](json& j) { j["rope_scaling"].erase(key); }); });
        EXPECT_TRUE(contains(e, fmt::format("rope_scaling of type \"llama3\" has no \"{}\"", key)))
            << e;
    }
    std::string e = error_of([&] {
        read_edited(dir, kLlama31, [](json& j) { j["rope_scaling"]["high_freq_factor"] = 1.0; });
    });
    EXPECT_TRUE(contains(e, "high_freq_factor 1 must be greater than low_freq_factor 1")) << e;
    e = error_of(
        [&] { read_edited(dir, kLlama31, [](json& j) { j["rope_scaling"]["factor"] = "8"; }); });
    EXPECT_TRUE(contains(e, "\"rope_scaling.factor\" is \"8\", expected a positive number")) << e;
}

// Keys that ask for another model than weft's Llama are refused by name (check_model_keys);
// LlamaConfig ignores sliding_window, so a Llama file may hold one.
TEST(HfLlamaConfig, ErrorKeysThatChangeTheModel) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) { j["attention_bias"] = true; });
    EXPECT_TRUE(contains(e,
                         "\"attention_bias\" is true, expected false (weft's Llama has no "
                         "biases in its attention projections): weft would run another "
                         "model than transformers builds from this file"))
        << e;
    e = error_with(dir, [](json& j) { j["mlp_bias"] = "no"; });
    EXPECT_TRUE(contains(e, "\"mlp_bias\" is \"no\", expected false (weft's Llama has no biases"))
        << e;
    e = error_with(dir, [](json& j) { j["hidden_act"] = "gelu"; });
    EXPECT_TRUE(contains(e, "\"hidden_act\" is \"gelu\", expected \"silu\"")) << e;
    e = error_with(dir, [](json& j) { j["partial_rotary_factor"] = 0.5; });
    EXPECT_TRUE(contains(e,
                         "\"partial_rotary_factor\" is 0.5, expected 1 (weft rotates every "
                         "dimension of each head)"))
        << e;
    EXPECT_EQ(read_edited(dir, kSmolLM,
                          [](json& j) {
                              j["sliding_window"] = 4096;
                              j["partial_rotary_factor"] = 1.0;
                          })
                  .hidden_size,
              576);
}

TEST(HfLlamaConfig, ErrorArchitectures) {
    TempDir dir;
    std::string e = error_with(
        dir, [](json& j) { j["architectures"] = json::array({"LlamaForSequenceClassification"}); });
    EXPECT_TRUE(contains(e,
                         "architectures is [\"LlamaForSequenceClassification\"], expected "
                         "[\"LlamaForCausalLM\"]"))
        << e;
}

TEST(HfLlamaConfig, ErrorModelType) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) {
        j["model_type"] = "gpt2";
        j.erase("architectures");
    });
    EXPECT_TRUE(contains(e, "model_type is \"gpt2\", expected \"llama\"")) << e;
}

TEST(HfLlamaConfig, ErrorBadTokenIds) {
    TempDir dir;
    std::string e = error_with(dir, [](json& j) { j["eos_token_id"] = json::array({2, "x"}); });
    EXPECT_TRUE(contains(e, "\"eos_token_id\" holds \"x\"")) << e;
    e = error_with(dir, [](json& j) { j["bos_token_id"] = -1; });
    EXPECT_TRUE(contains(e, "\"bos_token_id\" holds -1")) << e;
}

TEST(HfLlamaConfig, WriteErrors) {
    TempDir dir;
    HfLlamaConfig c = read_text(dir, kSmolLM);
    c.num_key_value_heads = 2;
    std::string e = error_of([&] { write_hf_llama_config(dir.path(), c); });
    EXPECT_TRUE(contains(e, "num_attention_heads 9 is not divisible by num_key_value_heads 2"))
        << e;
    c = read_text(dir, kSmolLM);
    c.rope_scaling.type = "yarn";
    e = error_of([&] { write_hf_llama_config(dir.path(), c); });
    EXPECT_TRUE(contains(e, "rope_scaling type \"yarn\"")) << e;
    c = read_text(dir, kLlama31);
    c.eos_token_id = 5;
    e = error_of([&] { write_hf_llama_config(dir.path(), c); });
    EXPECT_TRUE(contains(e, "eos_token_ids starts with 128001 but eos_token_id is 5")) << e;
}

// What config.json says, unjudged: model/family.cpp's registry decides (test_family).
TEST(HfModelId, ReadsTypeAndArchitecture) {
    TempDir dir;
    auto id_of = [&](const std::string& text) {
        test::write_bytes(dir / "config.json", text);
        return read_hf_model_id(dir.path());
    };
    HfModelId id = id_of(R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})");
    EXPECT_EQ(id.model_type, "gpt2");
    EXPECT_EQ(id.architecture, "GPT2LMHeadModel");
    id = id_of(R"({"architectures": ["A", "B"]})");
    EXPECT_EQ(id.model_type, "");
    EXPECT_EQ(id.architecture, "");
    std::string e = error_of([&] { id_of(R"({"model_type": 3})"); });
    EXPECT_TRUE(contains(e, "model_type is 3, expected a string")) << e;
    e = error_of([&] { read_hf_model_id(dir / "nope"); });
    EXPECT_TRUE(contains(e, "cannot read")) << e;
}

}  // namespace
}  // namespace weft::ckpt
